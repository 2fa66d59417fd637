"""Attribute, span and instrument names: the OTel GenAI and HTTP semantic conventions, in one place.

The GenAI names are still at Development stability; keeping them here makes a rename one edit.
The conventions moved to open-telemetry/semantic-conventions-genai and renamed the client
metrics; as they document, `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental` switches
to the current names (instruments.LATEST_ONLY), and the default keeps the older ones.
"""

from collections.abc import Mapping

OPT_IN_VARIABLE = "OTEL_SEMCONV_STABILITY_OPT_IN"
GEN_AI_LATEST = "gen_ai_latest_experimental"


def latest_gen_ai(env: Mapping[str, str]) -> bool:
    """Whether the environment opts in to the current GenAI conventions."""
    values = env.get(OPT_IN_VARIABLE, "").split(",")
    return GEN_AI_LATEST in (value.strip() for value in values)


# GenAI (https://opentelemetry.io/docs/specs/semconv/gen-ai/)
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
# the model label of a model no route lists: the series stay bounded whatever clients send
OTHER_MODEL = "other"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"  # current only
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"
GEN_AI_FIRST_TOKEN_EVENT = "gen_ai.first_token"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"

OPERATION_CHAT = "chat"
OPERATION_TEXT_COMPLETION = "text_completion"

# HTTP, URL, server, error
HTTP_REQUEST_METHOD = "http.request.method"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
HTTP_ROUTE = "http.route"
URL_PATH = "url.path"
URL_SCHEME = "url.scheme"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
CLIENT_ADDRESS = "client.address"
NETWORK_PROTOCOL_VERSION = "network.protocol.version"
ERROR_TYPE = "error.type"

# this product's own
ROUTE = "latency_proxy.route"
OUTCOME = "outcome"
KIND = "kind"
PHASE = "phase"
SIGNAL = "signal"
FIRST_N = "n"
REQUEST_ID = "latency_proxy.request_id"
URL_PATH_LENGTH = "latency_proxy.url.path_length"  # set when url.path was cut
TTFT_S = "latency_proxy.ttft_s"
TPOT_S = "latency_proxy.tpot_s"
E2E_S = "latency_proxy.e2e_s"
TIME_TO_FIRST_CHUNK_S = "latency_proxy.time_to_first_chunk_s"
CHUNKS = "latency_proxy.chunks"
TTFNT_S = "latency_proxy.ttfnt_s"
TTFNT_N = "latency_proxy.ttfnt_n"
TOKEN_SOURCE = "latency_proxy.token_source"
OVERHEAD_REQUEST_S = "latency_proxy.overhead.request_s"
OVERHEAD_EVENT_S = "latency_proxy.overhead.event_s"
LOOP_LAG_MAX_S = "latency_proxy.event_loop.lag_max_s"  # the largest lag while in flight
OUTCOME_ATTR = "latency_proxy.outcome"
NOT_MEASURED = "latency_proxy.not_measured"
ANSWER_TTFT_S = "latency_proxy.answer_ttft_s"
REASONING_S = "latency_proxy.reasoning_s"
REASONING_SOURCE = "latency_proxy.reasoning_source"
SERVER_QUEUE_S = "latency_proxy.server.queue_s"
SERVER_TTFT_S = "latency_proxy.server.ttft_s"
SERVER_DECODE_S = "latency_proxy.server.decode_s"
SERVER_ITL_S = "latency_proxy.server.itl_s"
SPEC_ACCEPTANCE_RATE = "latency_proxy.spec.acceptance_rate"
SPEC_ACCEPTANCE_LENGTH = "latency_proxy.spec.acceptance_length"
MAX_ITL_S = "latency_proxy.max_itl_s"
STALLS = "latency_proxy.stalls"
# an agent's session and call graph (telemetry/sessions.py; the session is GenAI's
# conversation id)
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
SESSION_JOINED_BY = "latency_proxy.session.joined_by"
SESSION_TURN = "latency_proxy.session.turn"
SESSION_PARENT = "latency_proxy.session.parent"
SESSION_PARENT_GAP_S = "latency_proxy.session.parent_gap_s"
SESSION_TOOLS_ASKED = "latency_proxy.session.tools_asked"
SESSION_TOOLS_ANSWERED = "latency_proxy.session.tools_answered"
SESSION_PROMPT_BLOCKS = "latency_proxy.session.prompt_blocks"
REASON = "reason"
