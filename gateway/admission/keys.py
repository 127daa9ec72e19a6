"""API keys: parsing the key table and finding the key a request presents.

Pure. Keys are held only as SHA-256 digests, and a presented key is hashed and compared with every entry's
digest by `hmac.compare_digest`, so the time taken says nothing about how much of a key matched.

The keys file is JSON Lines: one object per line, blank lines and lines starting with `#` ignored:

    {"name": "team-a", "key": "sk-...", "rpm": 60, "tpm": 100000, "parallel": 4, "models": ["smollm2"]}
    {"name": "team-b", "sha256": "<64 hex digits>"}
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class KeyFileError(ValueError):
    """The keys file (or GATEWAY_API_KEYS) cannot be used; the message names the line."""


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True)
class ApiKey:
    """One key's identity and limits; `models` None allows every model."""

    name: str
    sha256: bytes
    rpm: int | None = None
    tpm: int | None = None
    parallel: int | None = None
    models: frozenset[str] | None = None

    @property
    def has_rate_limits(self) -> bool:
        return self.rpm is not None or self.tpm is not None

    def allows(self, *names: str) -> bool:
        """Whether the key may use a model known by any of `names` (the name asked for, its alias target)."""
        return self.models is None or any(name in self.models for name in names)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@\-]+$")
    key: str | None = Field(None, min_length=1)
    sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    parallel: int | None = Field(None, ge=1)
    models: list[str] | None = None

    @model_validator(mode="after")
    def _one_secret(self) -> _Entry:
        if (self.key is None) == (self.sha256 is None):
            raise ValueError("give exactly one of `key` and `sha256`")
        return self

    def api_key(self) -> ApiKey:
        secret = digest(self.key) if self.key is not None else bytes.fromhex(self.sha256 or "")
        models = frozenset(self.models) if self.models is not None else None
        return ApiKey(self.name, secret, self.rpm, self.tpm, self.parallel, models)


class KeyTable:
    """The configured keys. An empty table of an open gateway lets everyone in; see `required`."""

    def __init__(self, keys: list[ApiKey], required: bool) -> None:
        self.keys = tuple(keys)
        self.required = required

    def lookup(self, presented: str) -> ApiKey | None:
        """The key whose digest equals the presented key's, comparing with every entry whatever matches."""
        wanted = digest(presented)
        found = None
        for key in self.keys:
            if hmac.compare_digest(key.sha256, wanted):
                found = key
        return found


def parse_key_list(text: str) -> list[ApiKey]:
    """GATEWAY_API_KEYS: comma-separated keys, named `env-1`, `env-2`, ... in logs and metrics."""
    secrets = [part.strip() for part in text.split(",") if part.strip()]
    return [ApiKey(f"env-{index}", digest(secret)) for index, secret in enumerate(secrets, start=1)]


def parse_keys_file(text: str) -> list[ApiKey]:
    """The entries of a JSON Lines keys file; a bad line raises KeyFileError naming it (never the key)."""
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            keys.append(_Entry.model_validate(orjson.loads(line)).api_key())
        except orjson.JSONDecodeError:
            raise KeyFileError(f"line {number}: not a JSON object") from None
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
            raise KeyFileError(f"line {number}: {problems}") from None
    return keys


def build_table(env_keys: str | None, file_text: str | None) -> KeyTable:
    """Keys from both sources. Once either is configured (even with no entries), every request needs a key."""
    keys = parse_key_list(env_keys or "") + parse_keys_file(file_text or "")
    names = [key.name for key in keys]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise KeyFileError(f"key names used twice: {', '.join(duplicates)}")
    if len({key.sha256 for key in keys}) != len(keys):
        raise KeyFileError("the same key is configured twice")
    return KeyTable(keys, required=env_keys is not None or file_text is not None)
