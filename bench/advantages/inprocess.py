"""What bench.advantages measures in its own process, no HTTP:

- the server's path for POST /v1/distill/advantages, stage by stage, as the route
  runs it (service/distill/advantages/router.py), for a JSON body and for the binary
  one: the body decoded (`service.distill.advantages.body.decode`: JSON parsed once by
  orjson, per-token lists to numpy, the storable check and pydantic on the rest; or the
  binary layout's header and columns), the service in three parts (its params and
  size checks and the arrays checked and concatenated; `service.distill.signals.compute`;
  the response objects), then the answer encoded (`body.encode`: orjson, or binary
  columns);
- the whole app in process (`create_app` with its lifespan, through httpx's
  ASGITransport: middleware, the key's lookup, everything but uvicorn and the socket);
- the raw floor: `service.distill.signals` on the trainer's arrays (`concat`, `needs`,
  `compute`), and the bare JSON of the same payload with orjson (decode the request,
  encode the answer).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from service.auth import Principal
from service.distill.advantages.binary import MEDIA_TYPE
from service.distill.advantages.body import decode, encode
from service.distill.advantages.service import AdvantageService, logprob_names, parse_params
from service.distill.signals import PARAMS, TrajectoryTokens, compute, concat, needs
from service.distill.signals.compute import resolved
from service.settings import Limits

PRINCIPAL = Principal(key_id="bench", role="admin", namespaces=frozenset({"*"}))
JSON_TYPE = "application/json"
FORMATS = {"json": JSON_TYPE, "binary": MEDIA_TYPE}  # body format -> its media type (request and answer)


@dataclass
class Stages:
    """Seconds per stage of the server's path, in the order it runs them."""

    decode_s: float = 0.0  # body.decode: the body parsed and validated, per-token values as arrays
    arrays_s: float = 0.0  # the service: params, size checks, checked arrays, concat
    compute_s: float = 0.0  # service.distill.signals.compute
    build_s: float = 0.0  # the service: the response objects (numpy views per trajectory)
    encode_s: float = 0.0  # body.encode: the answer's bytes

    @property
    def total_s(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    @property
    def json_s(self) -> float:
        """The body's share: decoding (parse, validation) and encoding."""
        return self.decode_s + self.encode_s


STAGE_LABELS = {
    "decode_s": "decode body (parse + validation)",
    "arrays_s": "service: checked arrays",
    "compute_s": "compute (service.distill.signals)",
    "build_s": "service: response objects",
    "encode_s": "encode answer",
}


def server_stages(raw: bytes, service: AdvantageService, media_type: str) -> tuple[Stages, bytes]:
    """The server's work on one body (`media_type` its format and the answer's), timed
    per stage: the route's decode and encode around AdvantageService.compute's own
    public steps, in its order; returns the stages and the answer's bytes."""
    s = Stages()
    t = time.perf_counter()
    body = decode(raw, media_type, service.limits)
    s.decode_s, t = _lap(t)
    params = parse_params(body.method, body.params)
    service.check_size(body)
    names = logprob_names(body)
    need = needs(body.method, params, names["teacher"], names["post"], names["pre"])
    batch = service.batch(body, need, params)
    s.arrays_s, t = _lap(t)
    result = compute(batch, body.method, params, need)
    s.compute_s, t = _lap(t)
    response = service.response(body, resolved(params, need), batch, result)
    s.build_s, t = _lap(t)
    out = encode(response, media_type).body
    s.encode_s, t = _lap(t)
    return s, bytes(out)


def new_service() -> AdvantageService:
    return AdvantageService(Limits())


@dataclass
class Floor:
    concat_s: float  # service.distill.signals.concat of the trainer's arrays
    compute_s: float  # needs + compute
    decode_s: float  # orjson.loads of the request body
    encode_s: float  # orjson.dumps of the answer (as parsed from the server's)

    @property
    def numpy_s(self) -> float:
        return self.concat_s + self.compute_s

    @property
    def json_s(self) -> float:
        return self.decode_s + self.encode_s

    @property
    def total_s(self) -> float:
        return self.numpy_s + self.json_s


def floor(
    method: str, params: dict[str, Any], groups: list[list[TrajectoryTokens]], raw: bytes, answer: Any
) -> tuple[Floor, np.ndarray]:
    """The floor for one request; returns it and the advantages it computed (to check
    against the server's answer)."""
    model = PARAMS[method].model_validate_json(json.dumps(params))
    t = time.perf_counter()
    batch = concat(groups)
    concat_s, t = _lap(t)
    need = needs(method, model, set(batch.teacher), set(batch.post), set(batch.pre))
    result = compute(batch, method, model, need)
    compute_s, t = _lap(t)
    orjson.loads(raw)
    decode_s, t = _lap(t)
    orjson.dumps(answer)
    encode_s, t = _lap(t)
    return Floor(concat_s, compute_s, decode_s, encode_s), result.shaped.advantages


def answer_advantages(answer: dict[str, Any]) -> np.ndarray:
    return np.concatenate([np.asarray(t["advantages"], dtype=np.float64) for t in answer["trajectories"]])


class InProcessApp:
    """The app itself (`create_app`, its lifespan run) on an event loop of this
    process, called through httpx's ASGITransport: no uvicorn, no socket."""

    def __init__(self, database_url: str, admin_key: str, data_dir: Path) -> None:
        from service.app import create_app
        from service.settings import Settings

        settings = Settings(
            database_url=database_url,
            admin_key=admin_key,
            data_dir=data_dir,
            embedding={"backend": "hashing"},  # type: ignore[arg-type]
            worker={"in_process": False},  # type: ignore[arg-type]
        )
        self.app = create_app(settings)
        self.headers = {"Authorization": f"Bearer {admin_key}"}
        self._runner = asyncio.Runner()
        self._lifespan = self.app.router.lifespan_context(self.app)
        self._client: httpx.AsyncClient | None = None

    def __enter__(self) -> InProcessApp:
        self._runner.run(self._lifespan.__aenter__())
        transport = httpx.ASGITransport(app=self.app)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://app", timeout=600)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._client is not None:
                self._runner.run(self._client.aclose())
            self._runner.run(self._lifespan.__aexit__(None, None, None))
        finally:
            self._runner.close()

    def post(self, path: str, raw: bytes, media_type: str = JSON_TYPE) -> tuple[float, bytes]:
        """Seconds from the call to the whole answer, and the answer (`media_type`: the
        body's format and the answer's)."""
        assert self._client is not None
        client = self._client
        headers = {**self.headers, "Content-Type": media_type, "Accept": media_type}

        async def call() -> tuple[float, bytes]:
            t0 = time.perf_counter()
            r = await client.post(path, content=raw, headers=headers)
            seconds = time.perf_counter() - t0
            r.raise_for_status()
            return seconds, r.content

        return self._runner.run(call())


def _lap(t: float) -> tuple[float, float]:
    now = time.perf_counter()
    return now - t, now
