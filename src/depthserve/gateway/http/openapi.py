"""The gateway's OpenAPI 3.1 document, built from its own routes so that it can never miss one.

Paths and methods come from the Starlette routes and the fast path, summaries from the handlers'
docstrings; the routes people call by hand (`/v1/depth`, `/v1/jobs`) get their parameters,
bodies and answers spelled out here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from depthserve import __version__
from depthserve.gateway.http.video_upload import VIDEO_TYPES

ERROR = {"$ref": "#/components/schemas/Error"}
DEPTH_FORMATS = {
    "application/x-npy": "float32 depth in metres, +inf where masked (the default)",
    "image/png": "16-bit depth in millimetres, 0 = invalid (`image/png;preview` or `?format=preview`: colourised)",
    "application/octet-stream": "`?format=ply`: a binary PLY point cloud (needs intrinsics)",
}
_UPLOAD = {
    "required": True,
    "content": {
        **{
            kind: {"schema": {"type": "string", "contentMediaType": kind}}
            for kind in ("image/png", "image/jpeg", "image/webp")
        },
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "contentMediaType": "image/*", "description": "RGB picture"},
                    "depth": {"type": "string", "description": "raw depth: 16-bit PNG in mm or .npy in metres"},
                    "intrinsics": {"type": "string", "description": "`fx,fy,cx,cy` or a JSON 3x3, pixels"},
                },
            }
        },
    },
}
_QUERY = [
    {
        "name": "resolution_level",
        "in": "query",
        "schema": {"type": "integer", "minimum": 0, "maximum": 9, "default": 9},
    },
    {
        "name": "model",
        "in": "query",
        "schema": {"type": "string"},
        "description": "model name (default: the gateway's)",
    },
    {"name": "format", "in": "query", "schema": {"type": "string", "enum": ["npy", "png", "preview", "ply"]}},
    {"name": "X-Request-Timeout", "in": "header", "schema": {"type": "number"}, "description": "deadline, seconds"},
    {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}, "description": "jobs: resubmit safely"},
]
_ERRORS = {
    str(code): {"description": text, "content": {"application/json": {"schema": ERROR}}}
    for code, text in (
        (400, "bad input"),
        (401, "missing or wrong API key"),
        (403, "needs an admin key, or a client on the gateway's machine"),
        (404, "unknown model, version or id"),
        (413, "body or image too large; video: too many frames, pixels or seconds"),
        (415, "unsupported content type or video codec"),
        (429, "over the rate limit, the caller's job limits or its upload budget (Retry-After)"),
        (503, "no backend, overloaded, the job store or the gateway's upload or reply memory full (Retry-After)"),
        (504, "deadline passed"),
    )
}
DETAILS: dict[tuple[str, str], dict[str, Any]] = {
    ("/v1/depth", "post"): {
        "summary": "Depth for one image (plus optional raw depth and intrinsics), in the format asked for.",
        "parameters": _QUERY[:4],
        "requestBody": _UPLOAD,
        "responses": {
            "200": {
                "description": "the depth map, in the format chosen by Accept or ?format=",
                "content": {k: {"schema": {"type": "string", "description": v}} for k, v in DEPTH_FORMATS.items()},
            },
            **_ERRORS,
        },
    },
    ("/v1/jobs", "post"): {
        "summary": "Accept a depth request as an asynchronous job; answers at once with its id.",
        "parameters": [p for p in _QUERY if p["name"] != "X-Request-Timeout"],
        "requestBody": _UPLOAD,
        "responses": {
            "202": {
                "description": "accepted",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobAccepted"}}},
            },
            "200": {"description": "the job of this Idempotency-Key already exists"},
            **_ERRORS,
        },
    },
}
_VIDEO_UPLOAD = {
    "required": True,
    "content": {
        **{kind: {"schema": {"type": "string", "contentMediaType": kind}} for kind in VIDEO_TYPES},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["video"],
                "properties": {
                    "video": {"type": "string", "contentMediaType": "video/*", "description": "H.264/HEVC/VP8/VP9/AV1"},
                    "depth": {
                        "type": "string",
                        "description": "raw depth per frame: a zip of 16-bit PNGs (mm), or an .npz (frames, H, W) in m",
                    },
                    "intrinsics": {"type": "string", "description": "`fx,fy,cx,cy` or a JSON 3x3, pixels"},
                },
            }
        },
    },
}
_VIDEO_QUERY = [
    _QUERY[0],
    _QUERY[1],
    {
        "name": "stride",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "default": 1},
        "description": "every n-th frame",
    },
    {
        "name": "max_frames",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1},
        "description": "stop after n frames",
    },
    {"name": "format", "in": "query", "schema": {"type": "string", "enum": ["zip", "npz", "mp4"], "default": "zip"}},
    {
        "name": "dtype",
        "in": "query",
        "schema": {"type": "string", "enum": ["float16", "float32"], "default": "float16"},
    },
]
VIDEO_FORMATS = {
    "application/zip": "depth_000000.png ... (16-bit PNG, mm, 0 = invalid), then frames.csv (position, frame, time_s)",
    "application/x-npz": "depth.npy (N, H, W) m, float16 (or dtype=float32), +inf masked; timestamps.npy; frames.npy",
    "video/mp4": "turbo-coloured preview, H.264 in fragmented MP4, one frame per frame taken",
}
DETAILS[("/v1/depth/video", "post")] = {
    "summary": "Depth for every frame of a video, streamed back in frame order as frames finish.",
    "parameters": _VIDEO_QUERY,
    "requestBody": _VIDEO_UPLOAD,
    "responses": {
        "200": {
            "description": "the frames' depth, in the format chosen by Accept or ?format= (X-Video-Frames: how many); "
            "a failure after the first frame cuts the stream short (HTTP/2 reset), never closes it as complete",
            "content": {k: {"schema": {"type": "string", "description": v}} for k, v in VIDEO_FORMATS.items()},
        },
        **_ERRORS,
        "406": {"description": "no output format for Accept", "content": {"application/json": {"schema": ERROR}}},
    },
}
_JOB_FORMATS = ["npy", "png", "preview", "ply", "zip", "npz", "mp4"]
DETAILS[("/v1/jobs", "post")] = {
    "summary": "Accept a depth request (an image, or a video) as an asynchronous job; answers at once with its id.",
    "description": "A video body (a video content type, or multipart whose first part is `video`) makes a video "
    "job: probed at once (400/413/415 here), run by this gateway frame by frame, its progress in the job's "
    "status, its result in the format asked (zip, npz, mp4).",
    "parameters": [
        *(p for p in _QUERY if p["name"] not in ("X-Request-Timeout", "format")),
        {"name": "format", "in": "query", "schema": {"type": "string", "enum": _JOB_FORMATS}},
        *(p for p in _VIDEO_QUERY if p["name"] in ("stride", "max_frames", "dtype")),
    ],
    "requestBody": {
        "required": True,
        "content": {
            **_UPLOAD["content"],  # type: ignore[dict-item]
            **_VIDEO_UPLOAD["content"],  # type: ignore[dict-item]
            "multipart/form-data": {
                "schema": {
                    "oneOf": [
                        _UPLOAD["content"]["multipart/form-data"]["schema"],  # type: ignore[index]
                        _VIDEO_UPLOAD["content"]["multipart/form-data"]["schema"],  # type: ignore[index]
                    ]
                }
            },
        },
    },
    "responses": DETAILS[("/v1/jobs", "post")]["responses"],
}
DETAILS[("/v1/jobs/{job_id}", "get")] = {
    "summary": "Describe a job: state, attempts, timestamps, error; a video job's progress.",
    "responses": {
        "200": {
            "description": "the job",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}},
        },
        **_ERRORS,
    },
}
SCHEMAS = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}, "reason": {"type": "string"}},
    },
    "JobAccepted": {
        "type": "object",
        "required": ["id", "status_url"],
        "properties": {"id": {"type": "string"}, "status_url": {"type": "string"}},
    },
    "Job": {
        "type": "object",
        "required": ["id", "state", "kind"],
        "properties": {
            "id": {"type": "string"},
            "state": {"type": "string", "enum": ["queued", "running", "succeeded", "failed", "cancelled"]},
            "kind": {"type": "string", "enum": ["depth", "video"]},
            "error": {"type": ["string", "null"]},
            "result_url": {"type": "string"},
            "content_type": {"type": "string"},
            "progress": {
                "type": "object",
                "description": "video jobs, updated about once a second while they run",
                "properties": {
                    "frames_done": {"type": "integer"},
                    "frames_total": {"type": "integer", "description": "known from the probe at submission"},
                    "fps": {"type": ["number", "null"]},
                    "eta_s": {"type": ["number", "null"]},
                },
            },
        },
    },
}
_PARAM = re.compile(r"\{([^}:]+)(:[^}]*)?\}")


def _summary(endpoint: Any) -> str:
    doc = getattr(endpoint, "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _operations(path: str, methods: Iterable[str], summary: str) -> dict[str, Any]:
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name, _ in _PARAM.findall(path)
    ]
    operations = {}
    for method in sorted(m.lower() for m in methods if m != "HEAD"):
        detail = DETAILS.get((path, method))
        operation: dict[str, Any] = (
            detail.copy() if detail else {"summary": summary, "responses": {"200": {"description": "OK"}, **_ERRORS}}
        )
        if params:
            operation["parameters"] = params + operation.get("parameters", [])
        operations[method] = operation
    return operations


def build_openapi(routes: Iterable[BaseRoute], fast_paths: Mapping[str, Any]) -> dict[str, Any]:
    """The document for these Starlette routes and fast-path routes (POST-only bare ASGI apps)."""
    paths: dict[str, Any] = {}
    for path, app in fast_paths.items():
        paths[path] = _operations(path, ["POST"], _summary(app))
    for route in routes:
        if not isinstance(route, Route) or ":path}" in route.path:
            continue  # the /v2 catch-all that answers unknown OIP paths with a JSON 404
        path = _PARAM.sub(lambda m: "{" + m.group(1) + "}", route.path)
        # A bare ASGI endpoint takes any method: the documented ones are those DETAILS spells out.
        methods = route.methods or [method.upper() for known, method in DETAILS if known == path] or ["GET"]
        paths.setdefault(path, {}).update(_operations(path, methods, _summary(route.endpoint)))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "depthserve gateway",
            "version": __version__,
            "description": "LingBot-Depth from many workers: /v1 for people, /v2 (Open Inference Protocol) for tools.",
        },
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": SCHEMAS},
    }


async def openapi_document(request: Request) -> Response:
    """Describe every route of this gateway as OpenAPI 3.1 (built once, on first request)."""
    state = request.app.state
    if getattr(state, "openapi", None) is None:
        state.openapi = build_openapi(request.app.routes, getattr(state, "fast_paths", {}))
    return JSONResponse(state.openapi)
