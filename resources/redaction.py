"""What of a secret a server may echo back, so that `resources.openai.wire.Redactor` masks it
in every error and log line: the secret as given, and its base64 forms.

A server (a proxy's error page, a debugging gateway) may echo the `Authorization` header
base64-encoded, alone or inside a longer encoded text: `Basic base64(user:password)`, or
`base64("Authorization: Bearer <key>")`. Where the secret starts in the encoded bytes decides
its base64 text (three byte alignments give three different texts), so `secret_forms` lists,
for each alignment and for the standard and URL-safe alphabets, the run of base64 characters
that encode only the secret's own bytes. The Redactor masks any 8 characters of any of them.

Invariant: every base64 character of `base64(prefix + secret + suffix)` that encodes bits of
the secret alone lies in a run listed here of at least 8 characters whenever the secret is at
least 6 bytes long, whatever `prefix` and `suffix` are.
"""

from __future__ import annotations

import base64

__all__ = ["base64_forms", "secret_forms"]

MIN_FORM = 8
"""Shorter runs are left out: the Redactor would mask them wherever they occur whole."""


def base64_forms(secret: str) -> list[str]:
    """The runs of base64 characters that encode only `secret`'s UTF-8 bytes, at each of the
    three byte alignments, standard and URL-safe; runs under `MIN_FORM` characters left out."""
    data = secret.encode("utf-8")
    forms = []
    for offset in range(3):
        first = -(-8 * offset // 6)  # the first character whose 6 bits are all the secret's
        end = 8 * (offset + len(data)) // 6  # one past the last such character
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            run = encode(b"\0" * offset + data).decode("ascii")[first:end]
            if len(run) >= MIN_FORM and run not in forms:
                forms.append(run)
    return forms


def secret_forms(api_key: str | None, user: str | None, password: str | None) -> list[str]:
    """The secrets to mask for an engine with this key and `user:password@` credentials: each
    as given, the Basic header's token, and the base64 forms of the key, the password and the
    token."""
    basic = base64.b64encode(f"{user or ''}:{password}".encode()).decode() if password else None
    forms = [s for s in (api_key, user, password, basic) if s]
    for secret in (api_key, password, basic):  # (the whole header line may be encoded again)
        if secret:
            forms += base64_forms(secret)
    return forms
