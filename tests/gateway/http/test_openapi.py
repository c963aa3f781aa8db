"""GET /openapi.json: a valid OpenAPI 3.1 document that names every route the gateway serves."""

from __future__ import annotations

from typing import Any

import httpx
from openapi_spec_validator import validate
from starlette.routing import Route

from depthserve.gateway.app import FastPath, create_app
from depthserve.settings import GatewaySettings


async def fetch(app: FastPath) -> Any:
    transport = httpx.ASGITransport(app=app)  # no lifespan: the document needs no backend
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        reply = await client.get("/openapi.json")
    assert reply.status_code == 200
    return reply.json()


async def test_the_document_is_valid_and_lists_every_route() -> None:
    app = create_app(GatewaySettings(backends=["127.0.0.1:1"]))
    document = await fetch(app)
    validate(document)
    routes = [r for r in app.fallback.routes if isinstance(r, Route) and ":path}" not in r.path]
    assert {r.path for r in routes} | {"/v1/depth", "/v1/depth/video"} == set(document["paths"])
    for route in routes:
        for method in route.methods or ():
            if method != "HEAD":
                assert method.lower() in document["paths"][route.path], (route.path, method)


async def test_the_depth_and_job_routes_say_what_they_take_and_give() -> None:
    document = await fetch(create_app(GatewaySettings(backends=["127.0.0.1:1"])))
    depth = document["paths"]["/v1/depth"]["post"]
    assert {"image/png", "image/jpeg", "multipart/form-data"} <= set(depth["requestBody"]["content"])
    assert {"application/x-npy", "image/png"} <= set(depth["responses"]["200"]["content"])
    assert depth["responses"]["503"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    assert {p["name"] for p in depth["parameters"]} >= {"resolution_level", "model", "X-Request-Timeout"}
    assert "202" in document["paths"]["/v1/jobs"]["post"]["responses"]
    job = document["paths"]["/v1/jobs/{job_id}"]
    assert {"get", "delete"} <= set(job) and job["get"]["parameters"][0]["name"] == "job_id"


async def test_the_video_route_says_what_it_takes_and_gives() -> None:
    document = await fetch(create_app(GatewaySettings(backends=["127.0.0.1:1"])))
    video = document["paths"]["/v1/depth/video"]["post"]
    assert {"video/mp4", "video/webm", "video/quicktime", "multipart/form-data"} <= set(video["requestBody"]["content"])
    assert {"application/zip", "application/x-npz", "video/mp4"} <= set(video["responses"]["200"]["content"])
    assert {p["name"] for p in video["parameters"]} >= {"stride", "max_frames", "format", "dtype", "resolution_level"}
    assert {"400", "413", "415", "503"} <= set(video["responses"])


async def test_jobs_take_videos_and_their_status_shows_progress() -> None:
    document = await fetch(create_app(GatewaySettings(backends=["127.0.0.1:1"])))
    submit = document["paths"]["/v1/jobs"]["post"]
    assert {"image/png", "video/mp4", "video/webm", "multipart/form-data"} <= set(submit["requestBody"]["content"])
    assert {p["name"] for p in submit["parameters"]} >= {"stride", "max_frames", "format", "resolution_level"}
    job = document["components"]["schemas"]["Job"]["properties"]
    assert {"frames_done", "frames_total", "fps", "eta_s"} == set(job["progress"]["properties"])
