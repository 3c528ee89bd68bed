"""Issue 36 item 4: a key echoed base64-encoded (alone, or inside an encoded header of any
length) is masked like the Basic header's token already was."""

import base64

from hypothesis import given, settings
from hypothesis import strategies as st

from resources.openai.wire import Redactor
from resources.redaction import base64_forms, secret_forms

KEYS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=6, max_size=60)


def secret_only_run(prefix: bytes, secret: bytes, suffix: bytes, encode) -> str:
    """The characters of encode(prefix + secret + suffix) whose 6 bits all lie in `secret`,
    counted bit by bit (independently of `base64_forms`' alignment arithmetic)."""
    text = encode(prefix + secret + suffix).decode()
    lo, hi = 8 * len(prefix), 8 * (len(prefix) + len(secret))
    return "".join(c for i, c in enumerate(text) if lo <= 6 * i and 6 * i + 6 <= hi)


@settings(max_examples=200, deadline=None)
@given(
    key=KEYS,
    prefix=st.binary(max_size=7),
    suffix=st.binary(max_size=5),
    urlsafe=st.booleans(),
)
def test_no_eight_characters_of_an_encoded_key_survive(key, prefix, suffix, urlsafe):
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    shown = Redactor(secret_forms(key, None, None))(
        "echo: " + encode(prefix + key.encode() + suffix).decode() + " end"
    )
    run = secret_only_run(prefix, key.encode(), suffix, encode)
    assert len(run) >= 8
    survivors = [run[i : i + 8] for i in range(len(run) - 7) if run[i : i + 8] in shown]
    assert not survivors, (shown, run)
    assert shown.startswith("echo: ") and shown.endswith(" end")


def test_an_encoded_bearer_header_is_masked_and_other_text_is_kept():
    key = "sk-live-0123456789abcdef"
    header = base64.b64encode(f"Authorization: Bearer {key}".encode()).decode()
    shown = Redactor(secret_forms(key, None, None))(f"gateway saw {header} at 12:00")
    assert "***" in shown and shown.startswith("gateway saw ") and "at 12:00" in shown
    assert all(form not in shown for form in base64_forms(key))


def test_short_runs_are_not_listed():
    assert all(len(form) >= 8 for form in base64_forms("abcdef"))
    assert base64_forms("abc") == []  # 3 bytes: 4 characters at most, never masked alone
