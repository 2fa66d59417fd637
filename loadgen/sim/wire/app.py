"""The simulator's HTTP surface: vLLM's OpenAI-compatible routes over a simulated engine.

    create_app(preset=None, *, api_keys=(), **options) -> Starlette

`options` are Simulator's, with their defaults there: ttft=None, itl=None,
served_model_name=None, stream_interval=1, seed=0, jitter=0.0, max_model_len=32768,
mean_output_tokens=256, script=None, faults=None, serving=None.

Give either `preset` (a presets.Preset or a preset name: the continuous-batching engine
and its performance model) or both `ttft` and `itl` in seconds (fixed timing, see fixed.py;
`max_model_len` and `mean_output_tokens` apply to fixed mode only, a preset has its own).
`serving` (serving.Serving) holds vLLM's reasoning-parser, prompt-tokens-details and
per-request-metrics flags. `script` (fixed mode only, for tests) turns on scripted mode,
see script.py; `faults` (a
list of faults.Rule, in either mode; empty: only the `x-fault` header) turns on failure
injection, see faults.py.
The served model name defaults to the preset's, or "sim" in fixed mode. Routes:
POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize; GET /v1/models, /health,
/metrics.
The engine starts and stops with the app's lifespan, so run it under a server (uvicorn) or
an ASGI client that runs the lifespan.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loadgen.sim.model import prefix_cache, presets, tokenizer
from loadgen.sim.model.plan import OutputPlan, plan_output
from loadgen.sim.model.sequence import Seq
from loadgen.sim.realtime.batching import Engine
from loadgen.sim.realtime.fixed import FixedTiming
from loadgen.sim.realtime.metrics import SimMetrics
from loadgen.sim.realtime.tracing import RequestTracer, provider_from_env
from loadgen.sim.wire import requests, responses
from loadgen.sim.wire.auth import AuthenticationMiddleware
from loadgen.sim.wire.errors import ApiError
from loadgen.sim.wire.faults import Faults, Injector, Rule
from loadgen.sim.wire.middleware import FaultMiddleware, faults_of, script_of
from loadgen.sim.wire.requests import GenerationRequest
from loadgen.sim.wire.responses import ChunkWriter, DeferredJSON, EventStream, Headers
from loadgen.sim.wire.script import Script, Scripting
from loadgen.sim.wire.serving import Serving


class Simulator:
    """One simulated server: its engine (or fixed timing), metrics and tracer."""

    def __init__(
        self,
        preset: presets.Preset | str | None = None,
        *,
        ttft: float | None = None,
        itl: float | None = None,
        served_model_name: str | None = None,
        stream_interval: int = 1,
        seed: int = 0,
        jitter: float = 0.0,
        max_model_len: int = 32768,
        mean_output_tokens: int = 256,
        script: dict[str, Any] | None = None,
        faults: Sequence[Rule] | None = None,
        serving: Serving | None = None,
    ) -> None:
        self.serving = serving or Serving()
        if isinstance(preset, str):
            preset = presets.load(preset)
        fixed = ttft is not None or itl is not None
        if (preset is None) != fixed or (fixed and (ttft is None or itl is None)):
            raise ValueError("give either a preset or both ttft and itl")
        if stream_interval < 1:
            raise ValueError("stream_interval must be ≥ 1")
        if script is not None and not fixed:
            raise ValueError("a script needs fixed timing (ttft and itl)")
        self.scripting = Scripting(script) if script is not None else None
        self.injector = Injector(faults, seed) if faults is not None else None
        self.stream_interval = stream_interval
        self.seed = seed
        self.cache_block_size = 0  # the prefix cache's block size; 0 when none
        if preset is not None:
            self.model_name = served_model_name or preset.served_model_name
            self.description = preset.description
            self.max_model_len = preset.max_model_len
            self.mean_output_tokens = preset.mean_output_tokens
            self.metrics = SimMetrics(self.model_name, self.max_model_len)
            self.backend: Engine | FixedTiming = Engine(
                preset, self.metrics, seed=seed, jitter=jitter
            )
            self.metrics.watch(  # the scheduler holds the state vLLM's gauges report
                self.backend.scheduler,
                (preset.perf, self.backend.gpus),
                preset.engine.gpu_memory_utilization,
            )
            if preset.engine.enable_prefix_caching:
                self.cache_block_size = preset.engine.block_size
        else:
            assert ttft is not None and itl is not None
            self.model_name = served_model_name or "sim"
            self.description = f"fixed timing: TTFT {ttft * 1e3:g} ms, ITL {itl * 1e3:g} ms"
            self.max_model_len = max_model_len
            self.mean_output_tokens = mean_output_tokens
            self.metrics = SimMetrics(self.model_name, self.max_model_len)
            self.backend = FixedTiming(ttft, itl, self.metrics, seed=seed, jitter=jitter)
            self.metrics.watch(self.backend)
        provider = provider_from_env()
        self.tracer = RequestTracer(provider) if provider else None
        self.created = int(time.time())
        self.vocabulary = tokenizer.Vocabulary()
        self.fingerprint = responses.system_fingerprint(f"{self.model_name}: {self.description}")

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.backend.start()
        try:
            yield
        finally:
            await self.backend.stop()
            if self.tracer:
                self.tracer.shutdown()

    # routes

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def metrics_endpoint(self, request: Request) -> Response:
        body, content_type = self.metrics.render(request.headers.get("accept"))
        return Response(body, headers={"content-type": content_type})

    async def tokenize(self, request: Request) -> Response:
        request_id = _request_id(request)
        script = script_of(request.scope)
        try:
            req = requests.parse_tokenize(await request.body())
            self._check_model(req.model, script)
            tokens = requests.tokenize_tokens(req, *([script.rules] if script else []))
        except ApiError as exc:
            return _error(exc, request_id)
        body = {
            "count": len(tokens),
            "max_model_len": self.max_model_len,
            "tokens": self.vocabulary.ids(tokens),
            "token_strs": tokens if req.token_strs else None,
        }
        return JSONResponse(body, headers={"x-request-id": request_id})

    async def detokenize(self, request: Request) -> Response:
        request_id = _request_id(request)
        try:
            model, ids = requests.parse_detokenize(await request.body())
            self._check_model(model, script_of(request.scope))
        except ApiError as exc:
            return _error(exc, request_id)
        body = {"prompt": self.vocabulary.text(ids)}
        return JSONResponse(body, headers={"x-request-id": request_id})

    async def chat(self, request: Request) -> Any:
        return await self._generate(request, chat=True)

    async def completions(self, request: Request) -> Any:
        return await self._generate(request, chat=False)

    # generation

    async def _generate(self, request: Request, chat: bool) -> Any:
        arrival = time.monotonic()
        request_id = _request_id(request)
        script = script_of(request.scope)
        try:
            body = await request.body()
            req = requests.parse_generation(body, chat, *([script.rules] if script else []))
            self._check_model(req.model, script)
            plan, reasoning = self._plan(req, requests.admit(req, self.max_model_len), script)
        except ApiError as exc:
            return _error(exc, request_id)
        interval = script.per_chunk if script else self.stream_interval
        first = script.per_chunk if script else 1
        job = _Job(
            req,
            plan,
            Seq(len(req.prompt), plan.tokens, arrival, interval, first, self._hashes(req, plan)),
            request_id,
            f"{'chatcmpl' if chat else 'cmpl'}-{request_id}",
            {k: v for k in _TRACE_HEADERS if (v := request.headers.get(k))} if self.tracer else {},
            script,
            faults_of(request.scope),
            reasoning,
        )
        headers: Headers = [(b"x-request-id", request_id.encode())]
        if req.stream:
            return EventStream(self._events(job), headers)
        return DeferredJSON(partial(self._complete, job), headers)

    async def _events(self, job: _Job) -> AsyncGenerator[bytes, None]:
        plan, reasoning = job.plan, job.reasoning
        writer = ChunkWriter(
            job.req,
            job.response_id,
            self._model(job),
            self.fingerprint,
            reasoning=self._reasoning_tokens(job),
            **self._scripted(job),
        )
        faults = job.faults
        if job.req.chat:
            yield writer.role()
        if faults and (extra := await faults.after_chunk(0)):
            yield extra
        sent = number = 0
        async with contextlib.aclosing(self._chunks(job)) as chunks:
            async for count in chunks:
                split = min(max(sent, reasoning), count)  # reasoning comes first
                thought = "".join(plan.pieces[sent:split])
                text = "".join(plan.pieces[split:count])
                sent, number = count, number + 1
                if count < plan.tokens:
                    yield writer.content(text, count, reasoning=thought)
                else:
                    finish, stop = plan.finish_reason, plan.stop_reason
                    yield writer.content(text, count, finish, stop, reasoning=thought)
                if faults and (extra := await faults.after_chunk(number)):
                    yield extra
        self._finished(job)
        serving = self.serving
        yield writer.tail(
            plan.tokens, serving.prompt_details(job.seq, job.req.chat), serving.metrics(job.seq)
        )

    async def _complete(self, job: _Job) -> dict[str, Any]:
        async with contextlib.aclosing(self._chunks(job)) as chunks:
            async for _ in chunks:
                pass
        self._finished(job)
        plan, serving = job.plan, self.serving
        text = "".join(plan.pieces[job.reasoning :])
        reasoning = self._reasoning_tokens(job)
        return responses.full_response(
            job.req,
            job.response_id,
            self._model(job),
            self.fingerprint,
            text,
            plan.tokens,
            plan.finish_reason,
            plan.stop_reason,
            reasoning=None
            if reasoning is None
            else (reasoning, "".join(plan.pieces[: job.reasoning])),
            prompt_details=serving.prompt_details(job.seq, job.req.chat),
            metrics=serving.metrics(job.seq),
            **self._scripted(job),
        )

    def _reasoning_tokens(self, job: _Job) -> int | None:
        """The reasoning count chat usage reports: None without a parser (or completions)."""
        details = self.serving.completion_details(job.req.chat, job.reasoning)
        return None if details is None else details["reasoning_tokens"]

    def _chunks(self, job: _Job) -> AsyncGenerator[int, None]:
        if job.script is None:
            return self.backend.generate(job.seq)
        assert isinstance(self.backend, FixedTiming)  # a script needs fixed timing
        return self.backend.generate(job.seq, *job.script.pace())

    def _plan(
        self, req: GenerationRequest, max_tokens: int, script: Script | None
    ) -> tuple[OutputPlan, int]:
        """The answer's tokens and how many of the first are reasoning: a reasoning phase
        comes before the answer and counts against max_tokens (a script's `tokens` is the
        whole output, its `reasoning_tokens` the first of them)."""
        tokens = script.tokens if script is not None else None
        fingerprint = tokenizer.fingerprint(req.prompt)
        scripted = script.reasoning_tokens if script is not None else None
        reasoning = self.serving.reasoning_length(str(fingerprint), req.chat, scripted)
        limit = max_tokens if tokens is None else tokens
        reasoning = min(reasoning, limit)
        answer = plan_output(
            fingerprint,
            max(1, limit - reasoning) if tokens is None else limit,
            ignore_eos=req.ignore_eos or tokens is not None,
            stop=req.stop,
            seed=self.seed,
            mean_output_tokens=self.mean_output_tokens,
        )
        if tokens is None and reasoning:
            thinking = plan_output(fingerprint ^ 1, reasoning, ignore_eos=True, seed=self.seed)
            pieces = thinking.pieces + answer.pieces
            answer = OutputPlan(pieces[:limit], answer.finish_reason, answer.stop_reason)
            if reasoning == limit:
                answer = OutputPlan(answer.pieces, "length")
        if script is not None and script.text is not None:
            answer = OutputPlan([script.text] * answer.tokens, answer.finish_reason)
        return answer, reasoning

    def _hashes(self, req: GenerationRequest, plan: OutputPlan) -> tuple[bytes, ...]:
        """The block hashes for the prefix cache, over the token ids of the prompt and then
        the answer: vLLM V1 caches an answer's blocks as they are generated, so the next turn
        of a conversation, which sends the answer back, finds them."""
        if not self.cache_block_size:
            return ()
        answer = [token for piece in plan.pieces for token in piece.split()]
        ids = [tokenizer.token_id(token) for token in (*req.prompt, *answer)]
        return prefix_cache.block_hashes(ids, self.cache_block_size)

    def _model(self, job: _Job) -> str:
        """The model an answer names: the served one, or a scripted request's own."""
        return (job.script and job.req.model) or self.model_name

    def _scripted(self, job: _Job) -> dict[str, Any]:
        """A scripted answer's usage and `created` (the same script gives the same bytes)."""
        if job.script is None:
            return {}
        return {"prompt_tokens": job.script.prompt_tokens, "created": self.created}

    def _check_model(self, model: str | None, script: Script | None) -> None:
        """vLLM's model check: no model (or "") means the served one. A scripted server
        answers to any name (script.py)."""
        if model and model != self.model_name and script is None:
            message = f"The model `{model}` does not exist. Valid aliases: {self.model_name}."
            raise ApiError(404, message, "model")

    def _finished(self, job: _Job) -> None:
        self.metrics.on_finish(job.seq, job.plan.finish_reason)
        if self.tracer:
            req = job.req
            params = {
                "max_tokens": req.max_tokens,
                "temperature": req.temperature,
                "top_p": req.top_p,
                "n": req.n,
            }
            self.tracer.record(
                job.trace_context,
                job.seq,
                request_id=job.request_id,
                model=self.model_name,
                params=params,
            )


_TRACE_HEADERS = ("traceparent", "tracestate")


@dataclass(slots=True)
class _Job:
    """One admitted generation request. No prompt text: only its token count and plan."""

    req: GenerationRequest
    plan: OutputPlan
    seq: Seq
    request_id: str
    response_id: str
    trace_context: dict[str, str]  # traceparent/tracestate, kept only when tracing
    script: Script | None  # a scripted request's (script.py)
    faults: Faults | None  # what goes wrong with it, when the server plays faults (faults.py)
    reasoning: int  # the answer's first tokens that are reasoning (serving.py)


def _request_id(request: Request) -> str:
    """The client's X-Request-Id, else a new one (vLLM with --enable-request-id-headers)."""
    return request.headers.get("x-request-id") or uuid.uuid4().hex


def _error(exc: ApiError, request_id: str) -> Response:
    headers = {"x-request-id": request_id}
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def create_app(
    preset: presets.Preset | str | None = None,
    *,
    api_keys: Sequence[str] = (),
    **options: Any,
) -> Starlette:
    """The simulator's app; `options` are Simulator's (module docstring), passed on as given."""
    sim = Simulator(preset, **options)
    routes = [
        Route("/health", sim.health, methods=["GET"]),
        Route("/v1/models", sim.models, methods=["GET"]),
        Route("/metrics", sim.metrics_endpoint, methods=["GET"]),
        Route("/tokenize", sim.tokenize, methods=["POST"]),
        Route("/detokenize", sim.detokenize, methods=["POST"]),
        Route("/v1/chat/completions", sim.chat, methods=["POST"]),
        Route("/v1/completions", sim.completions, methods=["POST"]),
    ]
    # vLLM's CORS middleware with its defaults (any origin, method, header): its
    # `vary: Origin` is on every response
    cors = Middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])
    middleware = [cors]
    if api_keys:  # outermost, as vLLM adds it after CORS
        middleware.insert(0, Middleware(AuthenticationMiddleware, tokens=api_keys))
    if sim.scripting is not None or sim.injector is not None:
        middleware.append(
            Middleware(FaultMiddleware, scripting=sim.scripting, injector=sim.injector)
        )
    app = Starlette(routes=routes, middleware=middleware, lifespan=sim.lifespan)
    app.state.sim = sim
    return app
