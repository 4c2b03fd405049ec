"""How a ``[reasoning]`` line is stored: the metadata of its system notice (SPEC 9, Storage).

Pure. The metadata marks the row as a notice of kind ``reasoning-loss`` for one agent, so a
reader of the store can tell it from the agent's own messages.
"""

from __future__ import annotations

from context_manager import REASONING_LOSS_KIND, MessageMeta


def notice_metadata(agent: str) -> MessageMeta:
    """The metadata to store a line with: ``cm.add_message("user", line, notice_metadata(a))``.

    Args:
        agent: the agent the notice is for (``target``).

    Returns:
        ``MessageMeta(system_notice=True, kind="reasoning-loss", target=agent)``.
    """
    return MessageMeta(system_notice=True, kind=REASONING_LOSS_KIND, target=agent)
