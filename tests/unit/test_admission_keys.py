"""The key table: parsing, lookup by SHA-256 digest in constant time, and model permissions."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from gateway.admission import keys as keys_module
from gateway.admission.keys import KeyFileError, build_table, parse_key_list, parse_keys_file

FILE = """
# team keys
{"name": "team-a", "key": "sk-alpha", "rpm": 60, "tpm": 1000, "parallel": 2, "models": ["m1"]}

{"name": "team-b", "sha256": "%s"}
""" % hashlib.sha256(b"sk-beta").hexdigest()


def test_file_entries_carry_names_limits_and_models() -> None:
    a, b = parse_keys_file(FILE)
    assert (a.name, a.rpm, a.tpm, a.parallel, a.models) == ("team-a", 60, 1000, 2, frozenset({"m1"}))
    assert a.sha256 == hashlib.sha256(b"sk-alpha").digest()
    assert (b.name, b.rpm, b.models) == ("team-b", None, None)
    assert b.sha256 == hashlib.sha256(b"sk-beta").digest()


def test_lookup_finds_plain_and_hashed_entries_and_nothing_else() -> None:
    table = build_table("sk-env1, sk-env2", FILE)
    assert table.required
    assert table.lookup("sk-alpha").name == "team-a"
    assert table.lookup("sk-beta").name == "team-b"
    assert table.lookup("sk-env2").name == "env-2"
    assert table.lookup("sk-alph") is None
    assert table.lookup("") is None


def test_lookup_compares_digests_of_every_entry_with_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    compare = hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(keys_module.hmac, "compare_digest", recording)
    table = build_table("sk-first,sk-second,sk-third", None)
    assert table.lookup("sk-first").name == "env-1"
    # Every entry is compared, also after the match, and only digests are: never the key itself.
    assert len(compared) == 3
    wanted = hashlib.sha256(b"sk-first").digest()
    assert all(presented == wanted and len(stored) == 32 for stored, presented in compared)


def test_no_source_means_an_open_gateway_and_an_empty_file_a_closed_one() -> None:
    assert not build_table(None, None).required
    closed = build_table(None, "# nobody yet\n")
    assert closed.required and closed.keys == ()


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"name": "a"}', "exactly one of"),
        ('{"name": "a", "key": "k", "sha256": "%s"}' % ("0" * 64), "exactly one of"),
        ('{"name": "a", "sha256": "abc"}', "sha256"),
        ('{"name": "a", "key": "k", "rpm": 0}', "rpm"),
        ('{"name": "a b", "key": "k"}', "name"),
        ('{"name": "a", "key": "k", "limit": 3}', "limit"),
        ("not json", "not a JSON object"),
    ],
)
def test_bad_lines_are_refused_with_their_line_number(line: str, message: str) -> None:
    with pytest.raises(KeyFileError, match=f"line 2: .*{message}"):
        parse_keys_file('{"name": "ok", "key": "k0"}\n' + line)


def test_errors_never_quote_the_key() -> None:
    with pytest.raises(KeyFileError) as raised:
        parse_keys_file('{"name": "a", "key": "sk-secret-value", "rpm": -1}')
    assert "sk-secret-value" not in str(raised.value)


def test_duplicate_names_and_keys_are_refused() -> None:
    with pytest.raises(KeyFileError, match="names used twice: a"):
        build_table(None, '{"name": "a", "key": "k1"}\n{"name": "a", "key": "k2"}')
    with pytest.raises(KeyFileError, match="same key"):
        build_table("k1", '{"name": "a", "key": "k1"}')


def test_env_keys_are_named_by_position() -> None:
    assert [k.name for k in parse_key_list(" k1 ,, k2 ")] == ["env-1", "env-2"]


def test_allowed_models_match_the_name_asked_for_or_its_alias_target() -> None:
    [limited, free] = parse_keys_file('{"name": "a", "key": "k1", "models": ["m1"]}\n{"name": "b", "key": "k2"}')
    assert limited.allows("m1") and limited.allows("alias", "m1")
    assert not limited.allows("m2") and not limited.allows("alias", "m2")
    assert free.allows("anything")
