"""Function calling through the Responses API on the SmolLM2 stack: a round trip with `previous_response_id`, a
streamed call, and one agent with one tool run by the OpenAI Agents SDK (which calls /v1/responses by default)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from localstack.stack import LocalStack
from tests.unit.test_responses_core import check_stream

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                          "required": ["city"], "additionalProperties": False}}  # fmt: skip


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


def test_function_call_round_trip(client: openai.OpenAI, model_name: str) -> None:
    first = client.responses.create(model=model_name, input="What is the weather in Paris?", tools=[WEATHER],
                                    tool_choice="required", max_output_tokens=60, temperature=0)  # fmt: skip
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather", first.output
    assert "city" in json.loads(calls[0].arguments) and calls[0].call_id.startswith("call_")
    second = client.responses.create(
        model=model_name,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"sky": "clear"}'}],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=20,
        temperature=0,
    )
    assert second.previous_response_id == first.id and second.output[0].type == "message" and second.output_text
    assert second.usage.input_tokens > first.usage.input_tokens  # the first exchange was in the prompt
    items = client.responses.input_items.list(second.id)
    assert [item.type for item in items.data] == ["function_call_output"]


def test_streamed_function_call(stack: LocalStack, model_name: str) -> None:
    body = {"model": model_name, "input": "Weather in Rome?", "tools": [WEATHER], "max_output_tokens": 60,
            "tool_choice": {"type": "function", "name": "get_weather"}, "temperature": 0, "stream": True}  # fmt: skip
    events = []
    with httpx.stream("POST", f"{stack.gateway_url}/v1/responses", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line.removeprefix("data: ")))
    final = check_stream(events)
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert done and done[0]["name"] == "get_weather" and "city" in json.loads(done[0]["arguments"])
    assert [item["type"] for item in final["output"]] == ["function_call"] * len(done)


async def test_an_agent_with_one_tool(base_url: str, model_name: str) -> None:
    import agents  # the OpenAI Agents SDK (openai-agents, in the test extra)

    agents.set_tracing_disabled(True)  # no traces sent to OpenAI
    cities: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        cities.append(city)
        return f"Sunny in {city}."

    model = agents.OpenAIResponsesModel(
        model=model_name, openai_client=openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    )
    agent = agents.Agent(
        name="weather",
        instructions="Use the weather tool, then answer.",
        tools=[get_weather],
        model=model,
        # the first turn must call the tool; the SDK then resets the choice to auto and the model answers
        model_settings=agents.ModelSettings(tool_choice="required", max_tokens=60, temperature=0),
    )
    result = await agents.Runner.run(agent, "What is the weather in Paris?", max_turns=3)
    assert len(cities) == 1
    assert isinstance(result.final_output, str) and result.final_output
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"] and kinds[-1] == "message_output_item"
