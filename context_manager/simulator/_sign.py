"""Thinking signatures: a versioned, sealed payload naming what a block is bound to.

Layout, base64 encoded: ``MAGIC | version | nonce | predecessor | producer model | organization |
end user | prefix MAC | seal``. The prefix MAC (HMAC) binds the producing model, organization and
end user, the bound head (system and bound tools) and the chain of non-thinking content before the
block (provider rules 1-3). The predecessor (the digest of the nearest thinking block before it in
the request that produced it, or none) is carried in the clear for the order check (provider rule
4). The seal is an HMAC over everything before it plus the block's own type and text, so an edited
or forged signature or text (a 400, provider rule 12) is told apart from a valid block whose model,
prefix or order differs (a binding failure). Pure functions; the key is passed in, never stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

import attrs

from context_manager import InvalidValue

from ._canon import canonical_json

MAGIC = b"cmsim"
"""Marks a payload as the simulator's, so a foreign signature is refused rather than misread."""

VERSION = 2
"""Payload layout version; a payload of another version is foreign (refused with a 400)."""

NONCE_BYTES = 16
"""Random per block, so two blocks with the same prefix (a retried call) never share a signature."""

DIGEST_BYTES = 32
"""SHA-256 / HMAC-SHA256 width: predecessor digests, MACs and seals."""

MAX_NAME_BYTES = 255
"""Longest model, organization or end-user name a payload can carry (one length byte)."""

_HEADER = MAGIC + bytes([VERSION])


@attrs.frozen
class Binding:
    """What a signed block is bound to.

    Attributes:
        model: the model that produced the block.
        organization: the organization it was produced under.
        end_user: the end user it was produced for.
        head: digest of the bound head (canonical system and bound tools).
        chain: chain value of every non-thinking ``(role, block)`` before the block.
        predecessor: digest of the nearest thinking block before it, or ``None``.
    """

    model: str
    organization: str
    end_user: str
    head: str
    chain: bytes
    predecessor: bytes | None


@attrs.frozen
class Payload:
    """A decoded signature: its parts, not yet checked against any key."""

    nonce: bytes
    predecessor: bytes | None
    model: str
    organization: str
    end_user: str
    mac: bytes
    seal: bytes

    def body(self) -> bytes:
        """The bytes the seal covers (everything before it)."""
        flag = b"\x00" + bytes(DIGEST_BYTES) if self.predecessor is None else b"\x01"
        pred = b"" if self.predecessor is None else self.predecessor
        names = b"".join(_name(n) for n in (self.model, self.organization, self.end_user))
        return _HEADER + self.nonce + flag + pred + names + self.mac


def _name(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > MAX_NAME_BYTES:
        raise InvalidValue(f"name {value[:40]!r}... is longer than {MAX_NAME_BYTES} bytes")
    return bytes([len(raw)]) + raw


def _hmac(key: bytes, label: bytes, message: bytes) -> bytes:
    return hmac.new(key, label + b"\x00" + message, hashlib.sha256).digest()


def block_digest(block_type: str, signature: str) -> bytes:
    """The digest a later block records as its predecessor: the block's type and signature."""
    return hashlib.sha256(f"{block_type}\x00{signature}".encode()).digest()


def prefix_mac(key: bytes, nonce: bytes, binding: Binding) -> bytes:
    """HMAC over the nonce, producer, organization, end user, head, prefix chain, predecessor."""
    message = canonical_json(
        [
            VERSION,
            nonce.hex(),
            binding.model,
            binding.organization,
            binding.end_user,
            binding.head,
            binding.chain.hex(),
            None if binding.predecessor is None else binding.predecessor.hex(),
        ]
    )
    return _hmac(key, b"bind", message.encode())


def _seal(key: bytes, body: bytes, block_type: str, own_text: str) -> bytes:
    own = canonical_json([block_type, own_text]).encode()
    return _hmac(key, b"seal", body + own)


def sign(
    key: bytes, binding: Binding, *, block_type: str, own_text: str, nonce: bytes | None = None
) -> str:
    """A new signature for a block of ``block_type`` with text ``own_text`` bound to ``binding``.

    Args:
        key: the simulator's HMAC key.
        binding: what the block is bound to.
        block_type: ``"thinking"`` or ``"redacted_thinking"``.
        own_text: the block's text as returned (``""`` for redacted blocks and omitted display).
        nonce: fixed bytes for reproducible output; random when ``None``.

    Returns:
        The base64 signature (for a redacted block, its ``data``).

    Raises:
        ValueError: ``nonce`` has the wrong length or a name is too long.
    """
    nonce = secrets.token_bytes(NONCE_BYTES) if nonce is None else nonce
    if len(nonce) != NONCE_BYTES:
        raise InvalidValue(f"nonce must be {NONCE_BYTES} bytes, got {len(nonce)}")
    payload = Payload(
        nonce,
        binding.predecessor,
        binding.model,
        binding.organization,
        binding.end_user,
        prefix_mac(key, nonce, binding),
        b"",
    )
    seal = _seal(key, payload.body(), block_type, own_text)
    return base64.b64encode(payload.body() + seal).decode("ascii")


def _take_name(raw: bytes, at: int) -> tuple[str, int] | None:
    if at >= len(raw):
        return None
    size = raw[at]
    end = at + 1 + size
    if end > len(raw):
        return None
    try:
        return raw[at + 1 : end].decode(), end
    except UnicodeDecodeError:
        return None


def decode(signature: object) -> Payload | None:
    """The payload of ``signature``, or ``None`` when it is empty, not base64 or not ours."""
    if not isinstance(signature, str) or not signature:
        return None
    try:
        raw = base64.b64decode(signature.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    if not raw.startswith(_HEADER):
        return None
    at = len(_HEADER)
    nonce, at = raw[at : at + NONCE_BYTES], at + NONCE_BYTES
    flag, pred, at = raw[at : at + 1], raw[at + 1 : at + 1 + DIGEST_BYTES], at + 1 + DIGEST_BYTES
    if flag not in (b"\x00", b"\x01") or len(pred) != DIGEST_BYTES:
        return None
    names: list[str] = []
    for _ in range(3):
        taken = _take_name(raw, at)
        if taken is None:
            return None
        name, at = taken
        names.append(name)
    if len(raw) != at + 2 * DIGEST_BYTES:
        return None
    mac, seal = raw[at : at + DIGEST_BYTES], raw[at + DIGEST_BYTES :]
    predecessor = pred if flag == b"\x01" else None
    return Payload(nonce, predecessor, names[0], names[1], names[2], mac, seal)


def is_sealed(key: bytes, payload: Payload, *, block_type: str, own_text: str) -> bool:
    """True when ``payload`` was made with ``key`` for a block of this type and text."""
    expected = _seal(key, payload.body(), block_type, own_text)
    return hmac.compare_digest(expected, payload.seal)


def prefix_matches(key: bytes, payload: Payload, head: str, chain: bytes) -> bool:
    """True when a sealed ``payload`` was made after this bound head and content chain."""
    binding = Binding(
        payload.model, payload.organization, payload.end_user, head, chain, payload.predecessor
    )
    return hmac.compare_digest(payload.mac, prefix_mac(key, payload.nonce, binding))
