"""OpenAI's Responses API (issue 26): a pure core (protocol, translate, objects, events) over the chat path, and a
store (SQLite by default, PostgreSQL with GATEWAY_DATABASE_URL) for stored responses and conversation state."""
