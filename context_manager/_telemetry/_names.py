"""The names telemetry emits: GenAI semantic-convention keys and this library's own.

Pure constants. The ``gen_ai.*`` names follow the OpenTelemetry GenAI semantic conventions
(Development status; open-telemetry/semantic-conventions-genai, gen-ai schema 1.42.0-dev, with
the cache-write usage key as renamed there in #440); ``context_manager.*`` names are this
library's own (the conventions have none for reasoning loss). Changing a value here changes what
every operator's dashboard reads: treat them as the public contract.
"""

from __future__ import annotations

from typing import Final

PROVIDER: Final = "anthropic"
"""``gen_ai.provider.name`` on every call span and metric."""

OP_CHAT: Final = "chat"
OP_INVOKE_AGENT: Final = "invoke_agent"
OP_EXECUTE_TOOL: Final = "execute_tool"
COMPILE_SPAN: Final = "compile"
"""The internal span of one compile (a name of this library's: the conventions have none)."""

# GenAI semantic-convention attribute keys
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
REQUEST_STREAM: Final = "gen_ai.request.stream"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ: Final = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_WRITE: Final = "gen_ai.usage.cache_write.input_tokens"
"""The current name (semantic-conventions-genai #440); collectors built on earlier releases
know it as ``gen_ai.usage.cache_creation.input_tokens`` and show this one as a plain attribute."""
CONVERSATION_ID: Final = "gen_ai.conversation.id"
CONVERSATION_COMPACTED: Final = "gen_ai.conversation.compacted"
AGENT_NAME: Final = "gen_ai.agent.name"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
TOKEN_TYPE: Final = "gen_ai.token.type"
ERROR_TYPE: Final = "error.type"

CAPTURE_CONTENT_VARIABLE: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The conventions' content-capture setting: message text is recorded only when it is on."""

# metrics
TOKEN_USAGE: Final = "gen_ai.client.token.usage"
OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
STRIPS_METRIC: Final = "context_manager.thinking.strips"
DROPS_METRIC: Final = "context_manager.thinking.drops"
NOTICES_METRIC: Final = "context_manager.notices"
CACHE_READ_SHARE_METRIC: Final = "context_manager.cache.read_share"

# this library's attributes
PREFIX: Final = "context_manager."
COMPILE_ID: Final = "context_manager.compile.id"
COMPILE_DRY: Final = "context_manager.compile.dry"
COMPILE_TOKENS: Final = "context_manager.compile.tokens"
COMPILE_MESSAGES: Final = "context_manager.compile.messages"
COMPILE_CACHE_MARKERS: Final = "context_manager.compile.cache_markers"
COMPILE_APPENDED: Final = "context_manager.compile.appended"
COMPILE_SHED: Final = "context_manager.compile.shed"
COMPILE_FOLDED: Final = "context_manager.compile.folded"
COMPILE_COMPACTED: Final = "context_manager.compile.compacted"
COMPILE_RESTORED: Final = "context_manager.compile.restored"
NAMESPACE: Final = "context_manager.namespace"
BRANCH: Final = "context_manager.branch"
CAUSE: Final = "context_manager.cause"
CHANGED: Final = "context_manager.changed"
REPLIES: Final = "context_manager.replies"
BLOCKS: Final = "context_manager.blocks"
REASON: Final = "context_manager.reason"
PATH: Final = "context_manager.path"
PLACED: Final = "context_manager.placed"
WHY: Final = "context_manager.why"
MESSAGE_ID: Final = "context_manager.message_id"
FROM_BLOCK: Final = "context_manager.from_block"
ORIGIN: Final = "context_manager.origin"
FORM: Final = "context_manager.form"
TOOLS_ADDED: Final = "context_manager.tools_added"
TOOLS_REMOVED: Final = "context_manager.tools_removed"
SYSTEM_CHANGED: Final = "context_manager.system_changed"
TURN_CALLS: Final = "context_manager.turn.calls"

# span events
STRIP_EVENT: Final = "context_manager.thinking_strip"
DROP_EVENT: Final = "context_manager.thinking_drop"
RELEASE_EVENT: Final = "context_manager.release"
NOTICE_EVENT: Final = "context_manager.notice"
HEAD_CHANGE_EVENT: Final = "context_manager.head_change"
