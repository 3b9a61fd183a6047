"""One typed schema for params.yaml, validated at load.

    python -m compilebench.config params.yaml    # validate and print the resolved config

A wrong type or an unknown key fails in OmegaConf and names the key; checks of meaning live in
`__post_init__` and name the key and what is allowed. Every stage calls `load_config()` first, before any work.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DTYPES = ("float32", "bfloat16", "float16")
WEIGHTS_CHOICES = ("auto", "hub", "random-init")
COMPILE_CACHES = ("cold", "shared")
SCALES = ("full", "tiny")
EAGER = "eager"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class ConfigError(ValueError):
    """A params file that does not match the schema; the message names the key and what is allowed."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass
class Paths:
    environment: str = "data/environment.json"  # torch/transformers/python/CUDA/device: benchmark re-runs on change
    image: str = "data/image/input.jpg"  # the benchmark image (COCO or the embedded fallback)
    image_meta: str = "data/image/input.json"  # where the image came from, its size and sha256
    checkpoints: str = "data/checkpoints"  # one folder per model, plus manifest.json
    manifest: str = "data/checkpoints/manifest.json"  # what load_models materialised, and from where
    results: str = "data/results/runs.jsonl"  # one JSON line per (model, batch, variant) run, raw samples kept
    journal: str = "data/journal"  # completed cells of an interrupted benchmark, for resuming (not a DVC output)
    run_info: str = "data/results/run_info.json"  # the MLflow parent run of this pipeline invocation
    summary: str = "data/results/summary.csv"  # eager vs compiled table
    reference: str = (
        "data/reference/published.csv"  # the doc's published numbers, one row per (scenario, GPU, batch, model)
    )
    verdicts: str = "data/results/verdicts.csv"  # each compiled run against the published numbers
    versions: str = "data/results/versions.csv"  # every run of the store across torch / transformers versions
    report: str = "data/report/report.md"  # the run's report, with its figures
    metrics: str = "data/results/metrics.json"  # dvc metrics
    plots: str = "data/plots"  # PNG figures
    plot_data: str = "data/plots/speedup.csv"  # dvc plots data
    tracking_uri: str = "sqlite:///mlruns/mlflow.db"  # MLflow store; MLFLOW_TRACKING_URI overrides

    def __post_init__(self) -> None:
        for key, value in vars(self).items():
            _require(bool(value), f"`paths.{key}` must be a non-empty path, got {value!r}")


@dataclass
class Image:
    url: str = "http://images.cocodataset.org/val2017/000000039769.jpg"  # the doc's benchmark image
    sha256: str | None = None  # hex digest the download must match; null = not pinned (digest is recorded)
    max_bytes: int = 10_000_000  # refuse larger downloads, bytes
    max_pixels: int = 40_000_000  # refuse larger decoded images (decompression bombs), pixels
    timeout_s: float = 10.0  # network timeout per request, seconds
    allow_fallback: bool = True  # network unreachable: use the embedded deterministic 640x480 image

    def __post_init__(self) -> None:
        _require(
            self.url.startswith(("http://", "https://")),
            f"`image.url` must start with http:// or https://, got {self.url!r}",
        )
        _require(
            self.sha256 is None or bool(_SHA256.match(self.sha256)),
            f"`image.sha256` must be 64 lowercase hex characters or null, got {self.sha256!r}",
        )
        _require(self.max_bytes > 0, f"`image.max_bytes` must be > 0, got {self.max_bytes}")
        _require(self.max_pixels > 0, f"`image.max_pixels` must be > 0, got {self.max_pixels}")
        _require(self.timeout_s > 0, f"`image.timeout_s` must be > 0 seconds, got {self.timeout_s}")


@dataclass
class Models:
    weights: str = "auto"  # auto: Hub or local HF cache, else random-init | hub: fail when offline | random-init
    seed: int = 0  # RNG seed for random-init weights

    def __post_init__(self) -> None:
        _require(
            self.weights in WEIGHTS_CHOICES,
            f"`models.weights` must be one of {WEIGHTS_CHOICES}, got {self.weights!r}",
        )


@dataclass
class Variant:
    compile: bool = True  # false = the eager baseline
    mode: str = "default"  # torch.compile mode
    inductor: dict[str, Any] = field(default_factory=dict)  # torch._inductor.config values set while compiling
    dynamic: bool | None = False  # torch.compile(dynamic=...); False = one static graph per batch size
    fullgraph: bool = False  # torch.compile(fullgraph=...); True fails on any graph break
    dtype: str | None = None  # compiled model's dtype; null = benchmark.dtype (eager always uses benchmark.dtype)
    channels_last: bool = False  # compiled model and 4-d inputs in channels_last memory format

    def check(self, name: str) -> None:
        """Validate this variant; `name` is its key under `variants`."""
        _require(
            self.mode in COMPILE_MODES,
            f"`variants.{name}.mode` must be one of {COMPILE_MODES}, got {self.mode!r}",
        )
        _require(
            name == EAGER or self.compile,
            f"`variants.{name}.compile` is false: only the `{EAGER}` variant may be eager",
        )
        _require(name != EAGER or not self.compile, f"`variants.{EAGER}.compile` must be false")
        _require(
            self.dtype is None or self.dtype in DTYPES,
            f"`variants.{name}.dtype` must be null or one of {DTYPES}, got {self.dtype!r}",
        )
        _require(
            name != EAGER or (self.dtype is None and not self.channels_last),
            f"`variants.{EAGER}` takes benchmark.dtype and the default memory format: set them on compiled variants",
        )
        if self.inductor:
            from torch._inductor import config as inductor_config  # imported only when options are set

            for option in self.inductor:
                _require(
                    hasattr(inductor_config, option.split(".")[0]),
                    f"`variants.{name}.inductor.{option}` is not a torch._inductor.config option",
                )


@dataclass
class Suite:
    models: list[str] = field(default_factory=list)  # Hub ids of registered model cards
    batch_sizes: list[int] = field(default_factory=lambda: [1])  # images per forward pass
    variants: list[str] = field(default_factory=lambda: [EAGER, "default"])  # keys of `variants`; eager required
    scale: str = "full"  # full: the published architecture | tiny: the card's small config (smoke tests)


@dataclass
class Benchmark:
    device: str = "cpu"  # cpu | cuda | cuda:N
    dtype: str = "float32"  # float32 | bfloat16 | float16 (model and inputs)
    num_threads: int = 0  # torch intra-op threads; 0 = one per core
    warmup_iters: int = 3  # untimed calls per variant after the first call
    min_iters: int = 10  # timed iterations per variant, at least
    min_time_s: float = 5.0  # timed seconds per variant, at least
    max_time_s: float = 60.0  # stop timing a variant after this many seconds
    memory_iters: int = 2  # calls measured alone for peak memory, per variant
    cell_timeout_s: float = 1800.0  # one (model, batch size) cell process is killed after this, seconds
    rtol: float = 1e-3  # compiled vs eager output: max |diff| / max |eager| allowed (float32; x50 for 16-bit)
    target_ci_halfwidth: float = 0.0  # also time until the speedup's 95% CI half-width is this small; 0 = off
    max_cv: float = 0.25  # a run whose latency std/mean exceeds this is `invalid` (too noisy to report)
    compile_cache: str = "cold"  # cold: a fresh inductor cache per cell | shared: the user's inductor cache
    warm_compile: bool = True  # also time compiles again in a fresh process on the cell's now-warm cache
    machine: str = ""  # this machine's name in a shared MLflow store; "" = its hostname
    cell_memory_limit_mib: float = 0.0  # address space a cell may add after loading its model, MiB; 0 = no cap

    def __post_init__(self) -> None:
        _require(
            bool(_DEVICE.match(self.device)), f"`benchmark.device` must be cpu, cuda or cuda:N, got {self.device!r}"
        )
        _require(self.dtype in DTYPES, f"`benchmark.dtype` must be one of {DTYPES}, got {self.dtype!r}")
        for key in ("num_threads", "warmup_iters"):
            _require(getattr(self, key) >= 0, f"`benchmark.{key}` must be >= 0, got {getattr(self, key)}")
        for key in ("min_iters", "memory_iters"):
            _require(getattr(self, key) >= 1, f"`benchmark.{key}` must be >= 1, got {getattr(self, key)}")
        for key in ("min_time_s", "cell_timeout_s", "rtol", "target_ci_halfwidth", "max_cv", "cell_memory_limit_mib"):
            _require(getattr(self, key) >= 0, f"`benchmark.{key}` must be >= 0, got {getattr(self, key)}")
        _require(
            self.compile_cache in COMPILE_CACHES,
            f"`benchmark.compile_cache` must be one of {COMPILE_CACHES}, got {self.compile_cache!r}",
        )
        _require(
            self.max_time_s >= self.min_time_s,
            f"`benchmark.max_time_s` ({self.max_time_s}) must be >= `benchmark.min_time_s` ({self.min_time_s})",
        )


@dataclass
class Plot:
    dpi: int = 120  # PNG resolution, dots per inch
    width_in: float = 10.0  # figure width, inches

    def __post_init__(self) -> None:
        _require(self.dpi > 0, f"`plot.dpi` must be > 0, got {self.dpi}")
        _require(self.width_in > 0, f"`plot.width_in` must be > 0, got {self.width_in}")


@dataclass
class Config:
    suite: str = "cpu"  # key of `suites` that runs
    paths: Paths = field(default_factory=Paths)
    image: Image = field(default_factory=Image)
    models: Models = field(default_factory=Models)
    benchmark: Benchmark = field(default_factory=Benchmark)
    plot: Plot = field(default_factory=Plot)
    variants: dict[str, Variant] = field(default_factory=dict)
    suites: dict[str, Suite] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(
            self.suite in self.suites,
            f"`suite` must be one of {sorted(self.suites)} (the keys of `suites`), got {self.suite!r}",
        )
        _require(EAGER in self.variants, f"`variants` must define `{EAGER}`, the baseline of every speedup")
        for name, variant in self.variants.items():
            variant.check(name)
        for name, suite in self.suites.items():
            self._check_suite(name, suite)

    def _check_suite(self, name: str, suite: Suite) -> None:
        from compilebench.models import CardError, registered_ids  # cards are data: read lazily

        try:
            known = registered_ids()
        except CardError as error:
            raise ConfigError(str(error)) from None
        _require(bool(suite.models), f"`suites.{name}.models` must name at least one model")
        for model_id in suite.models:
            _require(model_id in known, f"`suites.{name}.models`: unknown model {model_id!r}; registered: {known}")
        _require(
            len(set(suite.models)) == len(suite.models), f"`suites.{name}.models` lists a model twice: {suite.models}"
        )
        _require(bool(suite.batch_sizes), f"`suites.{name}.batch_sizes` must not be empty")
        for batch_size in suite.batch_sizes:
            _require(batch_size >= 1, f"`suites.{name}.batch_sizes` must all be >= 1, got {suite.batch_sizes}")
        _require(
            EAGER in suite.variants,
            f"`suites.{name}.variants` must include `{EAGER}` (the baseline), got {suite.variants}",
        )
        for variant in suite.variants:
            _require(
                variant in self.variants,
                f"`suites.{name}.variants`: unknown variant {variant!r}; defined: {sorted(self.variants)}",
            )
        _require(suite.scale in SCALES, f"`suites.{name}.scale` must be one of {SCALES}, got {suite.scale!r}")

    @property
    def selected(self) -> Suite:
        """The suite that runs."""
        return self.suites[self.suite]


def load_config(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Config:
    """Read params.yaml (plus `key=value` overrides), validate it against the schema, return typed objects."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"params file {str(path)!r} does not exist")
    try:
        raw = OmegaConf.load(path)
        merged = OmegaConf.merge(OmegaConf.structured(Config), raw, OmegaConf.from_dotlist(overrides or []))
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None)
        message = str(error).splitlines()[0]
        raise ConfigError(f"{path}: {'key `' + key + '`: ' if key else ''}{message}") from None
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    except Exception as error:  # YAML syntax errors come from the parser, not OmegaConf
        if type(error).__module__.startswith("yaml"):
            raise ConfigError(f"{path}: not valid YAML: {error}") from None
        raise


def main() -> None:
    config = load_config(sys.argv[1] if len(sys.argv) > 1 else "params.yaml")
    print(OmegaConf.to_yaml(OmegaConf.structured(config)))


if __name__ == "__main__":
    main()
