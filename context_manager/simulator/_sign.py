"""Thinking signatures: a versioned, sealed payload holding a model tag and the binding MAC.

Layout, base64 encoded: ``MAGIC | version | nonce | model tag | binding MAC | seal``. The seal is an
HMAC over everything before it plus the block's own type and text, so an edited signature or text
(a foreign block: a 400) is told apart from a valid block whose model or prefix differs (a binding
failure). The model tag tells a model mismatch from a prefix mismatch. Pure functions; the key is
passed in and never stored here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

import attrs

from context_manager._model._canonical import canonical_json

from ._api import MODEL_MISMATCH, PREFIX_MISMATCH

MAGIC = b"cmsim"
"""Marks a payload as the simulator's, so a foreign signature is refused rather than misread."""

VERSION = 1
"""Payload layout version; a payload of another version is foreign."""

NONCE_BYTES = 16
"""Random per block, so two blocks with the same prefix (a retried call) never share a signature."""

TAG_BYTES = 8
"""A truncated keyed hash of the model family: enough to tell families apart, not a MAC."""

MAC_BYTES = 32
"""HMAC-SHA256 width."""

_HEADER = MAGIC + bytes([VERSION])
PAYLOAD_BYTES = len(_HEADER) + NONCE_BYTES + TAG_BYTES + MAC_BYTES + MAC_BYTES
"""The decoded length of every valid signature."""


@attrs.frozen
class Binding:
    """What a signed block is bound to.

    Attributes:
        family: the model family that made (or reads) the block.
        head: digest of the bound head (canonical system and non-deferred tools).
        chain: chain value of every ``(role, block)`` before the block, as the model saw them.
        role: the role of the message the block is in (always ``"assistant"`` when produced).
    """

    family: str
    head: str
    chain: bytes
    role: str


@attrs.frozen
class Payload:
    """A decoded signature: its parts, not yet checked against any key."""

    nonce: bytes
    model_tag: bytes
    mac: bytes
    seal: bytes

    def body(self) -> bytes:
        """The bytes the seal covers (everything before it)."""
        return _HEADER + self.nonce + self.model_tag + self.mac


def _hmac(key: bytes, label: bytes, message: bytes) -> bytes:
    return hmac.new(key, label + b"\x00" + message, hashlib.sha256).digest()


def model_tag(key: bytes, family: str) -> bytes:
    """The tag naming ``family`` in a payload."""
    return _hmac(key, b"model", family.encode())[:TAG_BYTES]


def binding_mac(key: bytes, nonce: bytes, binding: Binding) -> bytes:
    """HMAC over the nonce, model family, head digest, prefix chain and role."""
    message = canonical_json(
        [VERSION, nonce.hex(), binding.family, binding.head, binding.chain.hex(), binding.role]
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
    """
    nonce = secrets.token_bytes(NONCE_BYTES) if nonce is None else nonce
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"nonce must be {NONCE_BYTES} bytes, got {len(nonce)}")
    payload = Payload(nonce, model_tag(key, binding.family), binding_mac(key, nonce, binding), b"")
    seal = _seal(key, payload.body(), block_type, own_text)
    return base64.b64encode(payload.body() + seal).decode("ascii")


def decode(signature: object) -> Payload | None:
    """The payload of ``signature``, or ``None`` when it is empty, not base64 or not ours."""
    if not isinstance(signature, str) or not signature:
        return None
    try:
        raw = base64.b64decode(signature.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    if len(raw) != PAYLOAD_BYTES or not raw.startswith(_HEADER):
        return None
    at = len(_HEADER)
    nonce, at = raw[at : at + NONCE_BYTES], at + NONCE_BYTES
    tag, at = raw[at : at + TAG_BYTES], at + TAG_BYTES
    mac, at = raw[at : at + MAC_BYTES], at + MAC_BYTES
    return Payload(nonce, tag, mac, raw[at:])


def is_sealed(key: bytes, payload: Payload, *, block_type: str, own_text: str) -> bool:
    """True when ``payload`` was made with ``key`` for a block of this type and text."""
    expected = _seal(key, payload.body(), block_type, own_text)
    return hmac.compare_digest(expected, payload.seal)


def binding_failure(key: bytes, payload: Payload, binding: Binding) -> str | None:
    """Why a sealed ``payload`` does not verify against ``binding``, or ``None`` when it does.

    Returns:
        ``"model_binding_mismatch"`` when the payload's model family differs,
        ``"prefix_binding_mismatch"`` when the family matches but the head or prefix differs.
    """
    if not hmac.compare_digest(payload.model_tag, model_tag(key, binding.family)):
        return MODEL_MISMATCH
    if not hmac.compare_digest(payload.mac, binding_mac(key, payload.nonce, binding)):
        return PREFIX_MISMATCH
    return None
