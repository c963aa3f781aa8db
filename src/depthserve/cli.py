"""The `depthserve` command: thin wrappers that parse flags and call into the components."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings
from typer.core import TyperGroup, TyperOption

from depthserve import __version__
from depthserve.cli_settings import parsed_flags, usage_error, with_settings_options
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


ConfigOpt = Annotated[Path | None, typer.Option("--config", help="YAML settings file (flags and env override it)")]
LogLevelOpt = Annotated[str | None, typer.Option(help="debug | info | warning | error [info]")]
SettingsT = TypeVar("SettingsT", bound=BaseSettings)


def _settings(cls: type[SettingsT], config: Path | None, flags: dict[str, Any]) -> SettingsT:
    """Settings from the flags given, the environment and the file; a bad value is a one-line usage error."""
    try:
        return load_settings(cls, config, **flags)
    except ValidationError as exc:
        raise usage_error(exc) from None


@contextmanager
def _refusing_taken_ports() -> Iterator[None]:
    """Turn a taken port into one line on stderr and exit code 1, before anything heavy starts."""
    try:
        yield
    except PortUnavailable as exc:
        typer.echo(f"depthserve: {exc}", err=True)
        raise typer.Exit(1) from None


@app.command()
@with_settings_options(WorkerSettings)
def worker(config: ConfigOpt = None, **flags: Any) -> None:
    """Run a model worker (OIP v2 gRPC server)."""
    values = parsed_flags(WorkerSettings, flags)
    values["checkpoint"] = _located_checkpoint(values.get("checkpoint"))
    settings = _settings(WorkerSettings, config, values)
    with _refusing_taken_ports():  # before the model loads
        check_free(settings.host, settings.port, "--port")
        check_free(settings.host, settings.metrics_port, "--metrics-port")
    from depthserve.worker.server import main

    main(settings)


@app.command()
@with_settings_options(GatewaySettings, skip=("config_file",))
def gateway(config: ConfigOpt = None, **flags: Any) -> None:
    """Run the HTTP/2 gateway in front of workers."""
    settings = _settings(GatewaySettings, config, parsed_flags(GatewaySettings, flags))
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
    workers: Annotated[int | None, typer.Option(help="number of workers [2]", min=1)] = None,
    gpus: Annotated[
        str | None, typer.Option(help="one worker per GPU: all, or CUDA indices such as 0,1 (not with --workers)")
    ] = None,
    model: Annotated[str, typer.Option(help="tiny | vitl14 | synthetic")] = "tiny",
    checkpoint: Annotated[str | None, typer.Option(help="vitl14: model.pt, .safetensors or downloaded repo")] = None,
    port: Annotated[int, typer.Option(help="gateway HTTP port")] = 8000,
    policy: Annotated[str, typer.Option(help="load-balancing policy")] = "round_robin",
    threads: Annotated[int | None, typer.Option(help="torch threads per worker (default 1)")] = None,
    broker: Annotated[str | None, typer.Option(help="jobs broker for gateway and workers: redis://, amqp://")] = None,
    log_format: Annotated[str | None, typer.Option(help="gateway and worker logs: text | json [text]")] = None,
    log_level: LogLevelOpt = None,
    grpc_port: Annotated[int | None, typer.Option(help="also serve OIP gRPC (tritonclient) on this port")] = None,
    autoscale: Annotated[
        str | None, typer.Option(help="MIN:MAX: add and drain workers as the gateway's scaling signal asks")
    ] = None,
    discovery: Annotated[
        str | None, typer.Option(help="registry workers join and the gateway follows: redis://... or etcd://...")
    ] = None,
) -> None:
    """Start a local cluster (gateway + N workers) and stop all of it on Ctrl-C or SIGTERM."""
    import os

    from depthserve.local_cluster import LocalCluster, scaling_options

    try:
        bounds = scaling_options(autoscale, discovery)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
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
    gpu_ids = None if gpus is None else _chosen_gpus(gpus, workers)
    checkpoint = _located_checkpoint(checkpoint)
    cluster = LocalCluster(
        workers=workers or 2,
        model=model,
        checkpoint=checkpoint,
        port=port,
        policy=policy,
        threads=threads,
        discovery=discovery,
        autoscale=bounds,
        gpu_ids=gpu_ids,
    )
    raise typer.Exit(cluster.run())


@app.command()
def sim(
    scenario: Annotated[str, typer.Argument(help="scenario YAML, or a shipped one (four_workers, drift, ...)")],
    policy: Annotated[str | None, typer.Option(help="run this one policy (e.g. learned, p2c, score@auto)")] = None,
    compare: Annotated[
        str | None, typer.Option(help="policies to run on the same arrivals, comma-separated [the scenario's]")
    ] = None,
    load: Annotated[str | None, typer.Option(help="offered loads, shares of capacity: 0.5,0.8 [scenario's]")] = None,
    duration: Annotated[float | None, typer.Option(help="simulated seconds [scenario's]", min=0.1)] = None,
    seed: Annotated[
        int | None, typer.Option(help="random seed of arrivals, service times and events [scenario's]")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="folder for table.md, results.json (both rewritten as each run ends) and plots")
    ] = None,
    jobs: Annotated[int, typer.Option(help="runs (policy x load) at once, each in its own process", min=1)] = 1,
) -> None:
    """Simulate a fleet: the real gateway core on a virtual clock in front of simulated GPU workers."""
    from rich.console import Console

    from depthserve.sim.command import main as simulate

    try:
        code = simulate(
            scenario, policy or compare, load, duration, out, Console(width=max(Console().width, 150)), seed, jobs
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    raise typer.Exit(code)


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


def _chosen_gpus(spec: str, workers: int | None) -> list[str]:
    """The GPUs `--gpus` names, as NVML ids a worker's CUDA_VISIBLE_DEVICES can hold (no torch import)."""
    import os

    from depthserve.telemetry.gpus import parse_gpus, physical_gpu_count, visible_gpu_ids

    if workers is not None:
        raise typer.BadParameter("--gpus starts one worker per GPU; leave out --workers", param_hint="--gpus")
    visible = visible_gpu_ids(os.environ, physical_gpu_count())
    try:
        return [visible[index] for index in parse_gpus(spec, len(visible))]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--gpus") from None


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
