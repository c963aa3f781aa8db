"""The `depthserve` command: thin wrappers that parse flags and call into the components."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup, TyperOption

from depthserve import __version__
from depthserve.ports import PortUnavailable, check_free
from depthserve.settings import GatewaySettings, WorkerSettings, load_settings


def _without_flag_values(params: list[Any]) -> list[Any]:
    """Show flags bare in help: typer's rich help prints a `<bool>` value after flags, which take none."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""
    return params


class _Commands(TyperGroup):
    """The command group, with flags shown without a value in its own help and every command's."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_values(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _without_flag_values(command.get_params(ctx))
        return command


app = typer.Typer(
    cls=_Commands,
    help="Serve LingBot-Depth from many workers behind one HTTP/2 gateway.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"depthserve {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", help="print the version and exit", callback=_print_version, is_eager=True)
    ] = False,
) -> None:
    """Serve LingBot-Depth from many workers behind one HTTP/2 gateway."""


ConfigOpt = Annotated[Path | None, typer.Option("--config", help="YAML settings file")]
# Options the worker and the gateway share (async jobs, logging).
BrokerOpt = Annotated[str | None, typer.Option(help="jobs broker: redis://... or amqp://... [none]")]
LogFormatOpt = Annotated[str | None, typer.Option(help="text | json [text]")]
JobStoreOpt = Annotated[str | None, typer.Option(help="Redis URL for job state [the redis broker]")]
JobNamespaceOpt = Annotated[str | None, typer.Option(help="prefix of job keys and queues [depthserve]")]
JobTtlSOpt = Annotated[float | None, typer.Option(help="job result lifetime, s [86400]")]
JobMaxAttemptsOpt = Annotated[int | None, typer.Option(help="attempts before a job fails [3]")]
JobVisibilityTimeoutSOpt = Annotated[float | None, typer.Option(help="re-run a silent job after, s [30]")]
JobTimeoutSOpt = Annotated[float | None, typer.Option(help="deadline of one job attempt, s [60]")]
LogLevelOpt = Annotated[str | None, typer.Option(help="debug | info | warning | error [info]")]


@contextmanager
def _refusing_taken_ports() -> Iterator[None]:
    """Turn a taken port into one line on stderr and exit code 1, before anything heavy starts."""
    try:
        yield
    except PortUnavailable as exc:
        typer.echo(f"depthserve: {exc}", err=True)
        raise typer.Exit(1) from None


@app.command()
def worker(
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(help="bind address [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="gRPC port [50051]")] = None,
    model: Annotated[str | None, typer.Option(help="tiny | vitl14 | synthetic [tiny]")] = None,
    name: Annotated[str | None, typer.Option(help="model name served [lingbot-depth]")] = None,
    checkpoint: Annotated[str | None, typer.Option(help="vitl14: model.pt, .safetensors or downloaded repo")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda[:N] [auto]")] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads")] = None,
    queue_limit: Annotated[int | None, typer.Option(help="requests waiting before refusal [64]")] = None,
    max_batch_size: Annotated[int | None, typer.Option(help="most requests per batch; 1 = off [1]")] = None,
    batching: Annotated[str | None, typer.Option(help="fixed | adaptive [adaptive]")] = None,
    max_queue_delay_ms: Annotated[float | None, typer.Option(help="fixed: longest wait to fill a batch [0]")] = None,
    target_latency_ms: Annotated[float | None, typer.Option(help="adaptive: latency target, ms [100]")] = None,
    max_batch_pixels: Annotated[int | None, typer.Option(help="most pixels per batch [32000000]")] = None,
    max_concurrent_batches: Annotated[int | None, typer.Option(help="batches on the device at once [1]")] = None,
    low_priority_delay_ms: Annotated[
        float | None, typer.Option(help="low-priority requests (video frames) queue as if this much later [1000]")
    ] = None,
    max_message_mb: Annotated[int | None, typer.Option(help="gRPC message limit, MiB [64]")] = None,
    max_pixels: Annotated[int | None, typer.Option(help="largest image, pixels [40000000]")] = None,
    warmup_requests: Annotated[int | None, typer.Option(help="warm-up inferences before ready [1]")] = None,
    warmup_levels: Annotated[str | None, typer.Option(help="resolution levels warmed up [0,9]")] = None,
    drain_notice_s: Annotated[float | None, typer.Option(help="serve on while gateways notice a drain [3]")] = None,
    drain_seconds: Annotated[float | None, typer.Option(help="grace period on SIGTERM [10]")] = None,
    synthetic_ms: Annotated[float | None, typer.Option(help="synthetic: base ms per batch [20]")] = None,
    synthetic_per_item_ms: Annotated[float | None, typer.Option(help="synthetic: ms per item [0]")] = None,
    synthetic_dist: Annotated[str | None, typer.Option(help="synthetic: const | exp | lognormal")] = None,
    seed: Annotated[int | None, typer.Option(help="synthetic: seed of service times [0]")] = None,
    synthetic_sigma: Annotated[float | None, typer.Option(help="synthetic: lognormal sigma [0.5]")] = None,
    synthetic_mem_gb: Annotated[float | None, typer.Option(help="synthetic: accelerator memory, GiB [80]")] = None,
    memory_budget_fraction: Annotated[float | None, typer.Option(help="device memory share usable [0.9]")] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="serve gRPC over TLS with this certificate")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="its private key")] = None,
    tls_ca: Annotated[Path | None, typer.Option(help="require client certificates from this CA (mTLS)")] = None,
    speed: Annotated[float | None, typer.Option(help="synthetic: speed factor dividing times [1]")] = None,
    broker: BrokerOpt = None,
    job_store: JobStoreOpt = None,
    job_namespace: JobNamespaceOpt = None,
    job_ttl_s: JobTtlSOpt = None,
    job_max_attempts: JobMaxAttemptsOpt = None,
    job_visibility_timeout_s: JobVisibilityTimeoutSOpt = None,
    job_timeout_s: JobTimeoutSOpt = None,
    job_concurrency: Annotated[int | None, typer.Option(help="jobs pulled and run at once [4]")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="HTTP port for /metrics; 0 = pick one [off]")] = None,
    log_format: LogFormatOpt = None,
    log_level: LogLevelOpt = None,
    discovery: Annotated[str | None, typer.Option(help="registry to join after warm-up: redis://HOST:PORT")] = None,
    advertise: Annotated[str | None, typer.Option(help="HOST[:PORT] gateways dial [bound or registry-facing]")] = None,
    version: Annotated[str | None, typer.Option(help="model version registered [1]")] = None,
    weight: Annotated[float | None, typer.Option(help="static weight registered [auto]")] = None,
    registry_ttl_s: Annotated[float | None, typer.Option(help="registry entry lifetime, s [5]")] = None,
) -> None:
    """Run a model worker (OIP v2 gRPC server)."""
    flags = {k: v for k, v in locals().items() if k != "config"}
    flags["checkpoint"] = _located_checkpoint(checkpoint)
    settings = load_settings(WorkerSettings, config, **flags)
    with _refusing_taken_ports():  # before the model loads
        check_free(settings.host, settings.port, "--port")
        check_free(settings.host, settings.metrics_port, "--metrics-port")
    from depthserve.worker.server import main

    main(settings)


@app.command()
def gateway(
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(help="bind address [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port, HTTP/1.1 and h2c [8000]")] = None,
    grpc_port: Annotated[int | None, typer.Option(help="OIP v2 gRPC port [off]")] = None,
    backends: Annotated[str | None, typer.Option(help="workers HOST:PORT[@WEIGHT|@auto],...")] = None,
    discovery: Annotated[
        str | None, typer.Option(help="backend sources, comma-separated: redis://H:P, file:///F.yaml, dns://NAME:PORT")
    ] = None,
    discovery_poll_s: Annotated[float | None, typer.Option(help="how often sources are read, s [1]")] = None,
    policy: Annotated[str | None, typer.Option(help="load-balancing policy [round_robin]")] = None,
    policy_options: Annotated[str | None, typer.Option(help='policy options as JSON: {"choice_count": 3}')] = None,
    auto_weights: Annotated[bool | None, typer.Option("--auto-weights", help="weigh by measured throughput")] = None,
    model: Annotated[str | None, typer.Option(help="default model name [lingbot-depth]")] = None,
    request_timeout_s: Annotated[float | None, typer.Option(help="request deadline, s [30]")] = None,
    max_body_mb: Annotated[float | None, typer.Option(help="largest request body, MiB [32]")] = None,
    health_interval_s: Annotated[float | None, typer.Option(help="health-check interval, s [1]")] = None,
    max_in_flight: Annotated[int | None, typer.Option(help="requests forwarded at once [256]")] = None,
    max_queue: Annotated[int | None, typer.Option(help="requests waiting for admission [512]")] = None,
    max_outstanding_per_backend: Annotated[
        int | None, typer.Option(help="requests at one backend at once; more wait in the gateway [0 = no cap]")
    ] = None,
    rate_limit: Annotated[str | None, typer.Option(help="per key/address, e.g. '50/s burst 100'")] = None,
    api_keys_file: Annotated[Path | None, typer.Option(help="NAME:SHA256 or NAME:plain:KEY lines")] = None,
    admin_keys_file: Annotated[Path | None, typer.Option(help="admin keys for drain [loopback only]")] = None,
    upload_timeout_s: Annotated[float | None, typer.Option(help="longest body upload, s [30]")] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="serve HTTPS (h2/HTTP1.1 by ALPN) with this cert")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="its private key (PKCS#8)")] = None,
    backend_tls_ca: Annotated[Path | None, typer.Option(help="CA of the workers' gRPC TLS certificates")] = None,
    backend_tls_cert: Annotated[Path | None, typer.Option(help="client certificate for mTLS to workers")] = None,
    backend_tls_key: Annotated[Path | None, typer.Option(help="its private key")] = None,
    broker: BrokerOpt = None,
    job_store: JobStoreOpt = None,
    job_namespace: JobNamespaceOpt = None,
    job_ttl_s: JobTtlSOpt = None,
    job_max_attempts: JobMaxAttemptsOpt = None,
    job_visibility_timeout_s: JobVisibilityTimeoutSOpt = None,
    job_timeout_s: JobTimeoutSOpt = None,
    job_concurrency: Annotated[int | None, typer.Option(help="in-process broker: jobs run at once [4]")] = None,
    video_max_active: Annotated[int | None, typer.Option(help="videos worked on at once [4]")] = None,
    video_window: Annotated[int | None, typer.Option(help="frames of one video in flight [16]")] = None,
    video_share: Annotated[
        float | None, typer.Option(help="admission capacity all videos' frames may hold [0.5]")
    ] = None,
    video_max_body_mb: Annotated[float | None, typer.Option(help="largest video upload, MiB [1024]")] = None,
    video_max_disk_mb: Annotated[
        float | None, typer.Option(help="video uploads on disk at once, requests and jobs, MiB [8192]")
    ] = None,
    video_max_frames: Annotated[int | None, typer.Option(help="most frames of one video, after stride [10000]")] = None,
    video_max_seconds: Annotated[float | None, typer.Option(help="longest video, s [3600]")] = None,
    video_max_frame_pixels: Annotated[int | None, typer.Option(help="largest video frame, pixels [8300000]")] = None,
    video_frame_timeout_s: Annotated[float | None, typer.Option(help="deadline of one video frame, s [60]")] = None,
    log_format: LogFormatOpt = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Run the HTTP/2 gateway in front of workers."""
    flags = {k: v for k, v in locals().items() if k != "config"}
    if policy_options is not None:
        try:
            flags["policy_options"] = json.loads(policy_options)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="--policy-options") from None
    settings = load_settings(GatewaySettings, config, **flags)
    if config is not None:
        settings = settings.model_copy(update={"config_file": config.resolve()})  # watched for version routes
    if not settings.backends and not settings.discovery:
        raise typer.BadParameter(
            "give at least one backend with --backends HOST:PORT, or a source with --discovery URL",
            param_hint="--backends",
        )
    with _refusing_taken_ports():  # before the app's imports; serve.main then binds exclusively
        check_free(settings.host, settings.port, "--port")
        check_free(settings.host, settings.grpc_port, "--grpc-port")
    from depthserve.gateway.app import check_settings
    from depthserve.gateway.serve import main

    try:
        check_settings(settings)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    with _refusing_taken_ports():
        main(settings)


@app.command()
def up(
    workers: Annotated[int, typer.Option(help="number of workers", min=1)] = 2,
    model: Annotated[str, typer.Option(help="tiny | vitl14 | synthetic")] = "tiny",
    checkpoint: Annotated[str | None, typer.Option(help="vitl14: model.pt, .safetensors or downloaded repo")] = None,
    port: Annotated[int, typer.Option(help="gateway HTTP port")] = 8000,
    policy: Annotated[str, typer.Option(help="load-balancing policy")] = "round_robin",
    threads: Annotated[int | None, typer.Option(help="torch threads per worker (default 1)")] = None,
    broker: Annotated[str | None, typer.Option(help="jobs broker for gateway and workers: redis://, amqp://")] = None,
    log_format: Annotated[str | None, typer.Option(help="gateway and worker logs: text | json [text]")] = None,
    log_level: LogLevelOpt = None,
    grpc_port: Annotated[int | None, typer.Option(help="also serve OIP gRPC (tritonclient) on this port")] = None,
) -> None:
    """Start a local cluster (gateway + N workers) and stop all of it on Ctrl-C or SIGTERM."""
    import os

    from depthserve.local_cluster import LocalCluster

    for component in ("GATEWAY", "WORKER"):  # the children read their settings from the environment too
        if log_format is not None:
            os.environ[f"DEPTHSERVE_{component}_LOG_FORMAT"] = log_format
        if log_level is not None:
            os.environ[f"DEPTHSERVE_{component}_LOG_LEVEL"] = log_level
        if broker is not None:  # without one, the gateway runs jobs itself (in-process, not durable)
            os.environ[f"DEPTHSERVE_{component}_BROKER"] = broker

    with _refusing_taken_ports():  # before any worker loads a model
        check_free("127.0.0.1", port, "--port")
        check_free("127.0.0.1", grpc_port, "--grpc-port")
    if grpc_port is not None:
        os.environ["DEPTHSERVE_GATEWAY_GRPC_PORT"] = str(grpc_port)
    checkpoint = _located_checkpoint(checkpoint)
    cluster = LocalCluster(
        workers=workers, model=model, checkpoint=checkpoint, port=port, policy=policy, threads=threads
    )
    raise typer.Exit(cluster.run())


@app.command()
def predict(
    image: Annotated[
        Path, typer.Argument(help="RGB image (PNG/JPEG/WebP) or video (MP4/WebM/MOV)", exists=True, dir_okay=False)
    ],
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="image: OUT.npy | OUT.png | OUT.ply; video: OUT.zip | OUT.npz | OUT.mp4"),
    ],
    depth: Annotated[
        Path | None, typer.Option(help="raw depth: 16-bit PNG in mm or .npy in m (video: zip of PNGs or .npz)")
    ] = None,
    intrinsics: Annotated[str | None, typer.Option(help="'fx,fy,cx,cy' or a JSON 3x3 file")] = None,
    preview: Annotated[bool, typer.Option(help="with a .png output: a colourised preview")] = False,
    resolution_level: Annotated[int, typer.Option(min=0, max=9, help="0 (fast) .. 9 (fine)")] = 9,
    stride: Annotated[int, typer.Option(min=1, help="video: every n-th frame")] = 1,
    max_frames: Annotated[int | None, typer.Option(min=1, help="video: at most this many frames")] = None,
    dtype: Annotated[str, typer.Option(help="video .npz: float16 | float32")] = "float16",
    url: Annotated[str, typer.Option(help="gateway URL")] = "http://127.0.0.1:8000",
) -> None:
    """Send one image or video to the gateway and write the depth result (a video with a progress bar)."""
    from depthserve.client import predict_file
    from depthserve.video_client import is_video, predict_video

    if is_video(image):
        options: dict[str, str | int] = {"resolution_level": resolution_level, "stride": stride, "dtype": dtype}
        if max_frames is not None:
            options["max_frames"] = max_frames
        text = (
            None if intrinsics is None else (Path(intrinsics).read_text() if Path(intrinsics).is_file() else intrinsics)
        )
        raise typer.Exit(predict_video(image, output, options, url, depth, text))

    raise typer.Exit(predict_file(image, output, depth, intrinsics, preview, resolution_level, url))


@app.command()
def status(
    url: Annotated[str, typer.Option(help="gateway URL")] = "http://127.0.0.1:8000",
    watch: Annotated[bool, typer.Option("--watch", help="refresh live, with QPS and p99, until Ctrl-C")] = False,
    interval: Annotated[float, typer.Option(help="--watch refresh interval, s", min=0.2)] = 2.0,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="DEPTHSERVE_API_KEY", help="API or admin key, when the gateway has protect_observability"),
    ] = None,
) -> None:
    """Show the gateway's backends as a table (once, or live with --watch)."""
    from depthserve.status_view import show_status, watch_status

    raise typer.Exit(watch_status(url, interval, api_key) if watch else show_status(url, api_key))


@app.command()
def drain(
    backend: Annotated[str, typer.Argument(help="worker address HOST:PORT as the gateway lists it")],
    undrain: Annotated[bool, typer.Option("--undrain", help="resume sending to it")] = False,
    url: Annotated[str, typer.Option(help="gateway URL")] = "http://127.0.0.1:8000",
    admin_key: Annotated[
        str | None, typer.Option(envvar="DEPTHSERVE_ADMIN_KEY", help="admin key, when the gateway has admin keys")
    ] = None,
) -> None:
    """Stop the gateway sending new requests to a worker (in-flight ones finish), or resume."""
    from depthserve.status_view import set_drain

    raise typer.Exit(set_drain(url, backend, not undrain, admin_key))


@app.command("new-key")
def new_key_command(
    name: Annotated[str, typer.Argument(help="who the key is for; its identity in rate limits")],
) -> None:
    """Make an API key: prints the key (give it to the client) and the line for --api-keys-file."""
    from depthserve.gateway.edge.api_keys import new_key

    key, digest = new_key()
    typer.echo(f"key:  {key}")
    typer.echo(f"line: {name}:{digest}")


weights_app = typer.Typer(help="Fetch published checkpoints into the local cache.", no_args_is_help=True)
app.add_typer(weights_app, name="weights")


@weights_app.command("download")
def weights_download(
    repo: Annotated[str | None, typer.Argument(help="Hugging Face repo, default the published one")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="checkpoint cache, default ~/.cache/depthserve")] = None,
    endpoint: Annotated[str | None, typer.Option(help="hub to fetch from, default https://huggingface.co")] = None,
) -> None:
    """Download a repo's model.pt with a progress bar (resumes if cut off); print where it is."""
    from depthserve.settings import WeightsSettings
    from depthserve.weights.cache import WeightsError
    from depthserve.weights.download import download_checkpoint

    settings = load_settings(WeightsSettings, None, repo=repo, cache_dir=cache_dir, endpoint=endpoint)
    try:
        path = download_checkpoint(settings.repo, settings)
    except WeightsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(str(path))
    typer.echo(f"serve it with: --model vitl14 --checkpoint {settings.repo} (up or worker)", err=True)


def _located_checkpoint(checkpoint: str | None) -> str | None:
    """Resolve --checkpoint from the caller's directory (or the cache) now, and say which file it is."""
    if checkpoint is None:
        return None
    from depthserve.weights.cache import WeightsError, locate_checkpoint

    try:
        located = locate_checkpoint(checkpoint)
    except WeightsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--checkpoint") from None
    typer.echo(f"checkpoint: {located}", err=True)
    return str(located)


def main() -> None:
    """Console-script entry point."""
    app()
