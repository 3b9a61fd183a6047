"""One typed schema for params.yaml, validated at load.

    python -m compilebench.config params.yaml    # validate and print the resolved config

A wrong type or an unknown key fails in OmegaConf and names the key; checks of meaning live in
`__post_init__` and name the key and what is allowed. Every stage calls `stage_config()` first, before any work.
One module on purpose (over 500 lines): the one schema of params.yaml, each section beside its checks.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from compilebench import logs
from compilebench.harness.invocation import LoopSettings, Validity
from compilebench.harness.records import (
    CURRENT,
    LOCAL_PREFIXES,
    MALLOC_LIBRARIES,
    TimingSpec,
    environment_labels,
    is_local,
    key_part,
)

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DTYPES = ("float32", "bfloat16", "float16")
WEIGHTS_CHOICES = ("auto", "hub", "random-init")
COMPILE_CACHES = ("cold", "shared")
MALLOCS = ("libc", *MALLOC_LIBRARIES)  # benchmark.malloc: whose malloc the trial processes run on
SCALES = ("full", "tiny")
CELLS = ("all", "published")
DEPLOYS = ("jit", "artifacts", "aoti", "regional")
DYNAMICS = (True, False, None, "batch", "batch-unbacked")  # variants.*.dynamic (records.DYNAMIC_BATCH*)
MATMUL_PRECISIONS = ("highest", "high", "medium")
EAGER = "eager"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


class ConfigError(ValueError):
    """A params file that does not match the schema; the message names the key and what is allowed."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


WINDOW_SUITES = ("paper-bs1-w1", "paper-bs1-w2", "paper-bs1-w3")  # removed 2026-11-28: an export splits any suite


@dataclass
class Paths:
    image: str = "data/image/input.jpg"  # the benchmark image (COCO or the embedded fallback)
    image_meta: str = "data/image/input.json"  # where the image came from, its size and sha256
    checkpoints: str = "data/checkpoints"  # one folder per model, plus manifest.json
    manifest: str = "data/checkpoints/manifest.json"  # what load_models materialised, and from where
    selection: str = "data/selection.json"  # the models, variants and environments the benchmark measures
    environments: str = ".compilebench/environments"  # built environments (venvs), one per resolved set of pins
    results: str = "data/results/runs.jsonl"  # one JSON line per (model, batch, variant) run, raw samples kept
    journal: str = "data/journal"  # completed trials of an interrupted benchmark, for resuming (not a DVC output)
    run_info: str = "data/results/run_info.json"  # the MLflow parent run of this pipeline invocation
    summary: str = "data/results/summary.csv"  # eager vs compiled table
    reference: str = (
        "data/reference/published.csv"  # the doc's published numbers, one row per (scenario, GPU, batch, model)
    )
    gpu_costs: str = "data/reference/gpu-costs.json"  # per-model process costs measured on a GPU (--export's estimate)
    verdicts: str = "data/results/verdicts.csv"  # each compiled run against the published numbers
    comparison: str = "data/results/comparison.csv"  # environments compared in one invocation, interleaved
    calibration: str = "data/calibration.json"  # noise of paired blocks per machine, pooled over runs; not DVC's
    store: str = "data/store"  # tables and figures read back from the MLflow store (not a DVC output)
    report: str = "data/report/report.md"  # the run's report, with its figures
    metrics: str = "data/results/metrics.json"  # dvc metrics
    cells: str = "data/results/cells.json"  # dvc metrics: per compared cell and metric, B/A, its CI, the verdict code
    plots: str = "data/plots"  # PNG figures
    tracking_uri: str = "sqlite:///mlruns/mlflow.db"  # MLflow store; MLFLOW_TRACKING_URI overrides

    def __post_init__(self) -> None:
        for key, value in vars(self).items():
            _require(bool(value), f"`paths.{key}` must be a non-empty path, got {value!r}")

    def tables(self) -> list[Path]:
        """The aggregate stage's tables and metric files, as they are attached to the parent run (aggregate, sync)."""
        return [Path(p) for p in (self.summary, self.verdicts, self.comparison, self.metrics, self.cells)]


@dataclass
class Image:
    url: str = "http://images.cocodataset.org/val2017/000000039769.jpg"  # the doc's benchmark image
    file: str | None = None  # a local image file benchmarked instead of `url` (same checks); null = use `url`
    sha256: str | None = None  # hex digest the download must match; null = not pinned (digest is recorded)
    max_bytes: int = 10_000_000  # refuse larger downloads, bytes
    max_pixels: int = 40_000_000  # refuse larger decoded images (decompression bombs), pixels
    timeout_s: float = 10.0  # network timeout per request, seconds
    allow_fallback: bool = True  # network unreachable: use the embedded deterministic 640x480 image

    def __post_init__(self) -> None:
        _require(
            self.url.startswith(("http://", "https://")),
            f"`image.url` must start with http:// or https://, got {self.url!r} (a local file goes in `image.file`)",
        )
        _require(self.file is None or bool(self.file.strip()), "`image.file` must be a path or null, got ''")
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
    text_queries: list[str] = field(default_factory=lambda: ["a photo of a cat", "a photo of a dog"])  # zero-shot
    #                  detection models without a card (a card holds its own)

    def __post_init__(self) -> None:
        _require(
            self.weights in WEIGHTS_CHOICES,
            f"`models.weights` must be one of {WEIGHTS_CHOICES}, got {self.weights!r}",
        )
        _require(
            bool(self.text_queries) and all(isinstance(q, str) and q.strip() for q in self.text_queries),
            f"`models.text_queries` must be a non-empty list of non-empty strings, got {self.text_queries!r}",
        )


@dataclass
class Variant:
    compile: bool = True  # false = the eager baseline
    mode: str = "default"  # torch.compile mode
    inductor: dict[str, Any] = field(default_factory=dict)  # torch._inductor.config values set while compiling
    dynamic: bool | str | None = False  # torch.compile(dynamic=...): false = static shapes, null = torch's default
    #   (a dim becomes dynamic when it changes), true = every dim; or dim 0 of every input marked dynamic: `batch`
    #   (torch._dynamo.mark_dynamic: sizes 0 and 1 still get their own graph) | `batch-unbacked` (mark_unbacked)
    fullgraph: bool = False  # torch.compile(fullgraph=...); True fails on any graph break
    dtype: str | None = None  # compiled model's dtype; null = benchmark.dtype (eager always uses benchmark.dtype)
    channels_last: bool = False  # compiled model and 4-d inputs in channels_last memory format
    deploy: str = "jit"  # how a fresh process gets its compiled model: jit (torch.compile; warm = local inductor
    #   cache) | artifacts (warm = empty cache + portable cache artifacts) | aoti (AOTInductor package: cold builds,
    #   warm loads) | regional (torch.compile of each repeated block only)
    serve: bool = False  # each process first serves every batch size of the suite, smallest first, on the one
    #   compiled model: first call, graphs and recompiles at each size; then it times its own batch size

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
        _require(self.deploy in DEPLOYS, f"`variants.{name}.deploy` must be one of {DEPLOYS}, got {self.deploy!r}")
        _require(
            self.dynamic in DYNAMICS,
            f"`variants.{name}.dynamic` must be one of true, false, null, batch, batch-unbacked; got {self.dynamic!r}",
        )
        _require(
            not self.serve or (self.compile and self.deploy == "jit"),
            f"`variants.{name}.serve` needs a compiled variant with deploy jit (a package or region serves no sizes)",
        )
        _require(
            self.deploy != "aoti" or (self.mode == "default" and not self.dynamic),
            f"`variants.{name}`: deploy aoti takes no compile mode or dynamic shapes (its options go in `inductor`)",
        )
        _require(
            name != EAGER or (self.dtype is None and not self.channels_last),
            f"`variants.{EAGER}` takes benchmark.dtype and the default memory format: set them on compiled variants",
        )

    def check_inductor_options(self, name: str) -> None:
        """Each inductor option names a torch._inductor.config value (imports torch: called by the stages that
        compile, not at every config load)."""
        if not self.inductor:
            return
        from torch._inductor import config as inductor_config

        for option in self.inductor:
            _require(
                hasattr(inductor_config, option.split(".")[0]),
                f"`variants.{name}.inductor.{option}` is not a torch._inductor.config option",
            )


@dataclass
class Settings:
    """How an environment's processes run where it differs from `benchmark` (empty: as `benchmark` says): so a
    comparison can weigh two settings on one stack, its processes alive together as two stacks' are. Only what a
    process is started or set up with; each key means what the `benchmark` key of its name means."""

    num_threads: int | None = None  # torch intra-op threads; 0 = one per core
    huge_pages: bool | None = None  # CPU: torch's allocator asks for transparent huge pages
    malloc: str | None = None  # CPU: libc, jemalloc or tcmalloc
    float32_matmul_precision: str | None = None  # highest | high (TF32 matmuls) | medium
    cudnn_allow_tf32: bool | None = None  # TF32 in cuDNN convolutions
    cudnn_benchmark: bool | None = None  # cuDNN autotuning of convolution algorithms

    def given(self) -> dict[str, Any]:
        """The settings this environment sets, by name."""
        return {item.name: getattr(self, item.name) for item in fields(self) if getattr(self, item.name) is not None}


@dataclass
class Environment:
    pins: dict[str, str] = field(default_factory=dict)  # package -> version, over the project's own pins
    settings: Settings = field(default_factory=Settings)  # where its processes run unlike `benchmark` says

    def check(self, name: str) -> None:
        """Validate this environment; `name` is its key under `environments`."""
        _require(
            name != CURRENT or not self.pins,
            f"`environments.{CURRENT}` is the project's own environment (constraints.txt, requirements.txt): "
            f"it takes no pins; name another environment for {dict(self.pins)}",
        )
        _require(
            name != CURRENT or not self.settings.given(),
            f"`environments.{CURRENT}` runs as `benchmark` says: it takes no settings; set `benchmark` itself, or "
            f"name another environment for {self.settings.given()}",
        )
        _require(
            name == CURRENT or bool(self.pins) or bool(self.settings.given()),
            f"`environments.{name}` must pin at least one package (e.g. `pins: {{torch: '2.14.1'}}`) or set at least "
            f"one of {[item.name for item in fields(Settings)]} (e.g. `settings: {{malloc: tcmalloc}}`)",
        )
        for package, version in self.pins.items():
            _require(bool(_PACKAGE.match(package)), f"`environments.{name}.pins`: {package!r} is not a package name")
            _require(
                bool(_VERSION.match(str(version))),
                f"`environments.{name}.pins.{package}` must be an exact version such as '2.14.1', got {version!r}",
            )


@dataclass
class Suite:
    models: list[str] = field(default_factory=list)  # carded Hub ids, any image checkpoint's Hub id, local folders
    batch_sizes: list[int] = field(default_factory=lambda: [1])  # images per forward pass
    variants: list[str] = field(default_factory=lambda: [EAGER, "default"])  # keys of `variants`; eager required
    scale: str = "full"  # full: the published architecture | tiny: the card's small config (smoke tests)
    cells: str = "all"  # all: every model x batch size x variant | published: only those a published number can
    #                     judge (reference.published_cells): a GPU window spent on the doc's cells alone


@dataclass
class Target:
    """The 95% CI half-width a cell is measured to (0.05 = +-5%), per kind of metric; 0 = no target for that kind."""

    speedup: float = 0.05  # speedup, and B/A of speedup
    compile: float = 0.05  # cold and warm compile time
    latency: float = 0.10  # eager and compiled latency

    def __post_init__(self) -> None:
        for key in ("speedup", "compile", "latency"):
            value = getattr(self, key)
            _require(0 <= value < 1, f"`benchmark.target.{key}` must be in [0, 1) (0.05 = +-5%), got {value}")


@dataclass
class Benchmark:
    device: str = "cpu"  # cpu | cuda | cuda:N
    dtype: str = "float32"  # float32 | bfloat16 | float16 (model and inputs)
    num_threads: int = 0  # torch intra-op threads; 0 = one per core
    replicates: int = 3  # blocks every run gets first: a fresh process per environment each (undisturbed ones)
    max_replicates: int = 10  # blocks a run may get at most, when its intervals are still wider than `target`
    budget_min: float = 10.0  # minutes of trial processes per compared environment: the first `replicates` blocks
    #                            always run, more (widest CIs first) only while they fit
    target: Target = field(default_factory=Target)  # CI half-widths more blocks aim for, widest cells first
    disturbed_cores: float = 0.25  # a process is disturbed (re-run in a new block) when other processes used more
    #                                than this many cores on average while it timed, or the VM lost as much to steal
    cold_replicates: int = 1  # of them, how many compile on an empty inductor cache (the rest on its warm cache)
    seed: int = 0  # seed of the run order (shuffled per round; environments interleaved in balanced blocks)
    warmup_iters: int = 2  # untimed calls after the first call, per process (at least 3 for CUDA-graph variants)
    warmup_s: float = 1.0  # right before timing, untimed rounds of every arm for at least this many seconds, longer
    #                        (up to 5x) while the last rounds still run faster than the ones before
    min_iters: int = 10  # timed pairs (eager, compiled) per process, at least
    min_time_s: float = 10.0  # timed seconds per process, at least
    max_time_s: float = 60.0  # stop timing a process after this many seconds, even below min_iters
    memory_iters: int = 1  # calls measured alone for peak memory, per process
    rtol: float = 1e-3  # compiled vs eager output: max |diff| / max |eager| allowed (float32; x50 for 16-bit)
    target_ci_halfwidth: float = 0.0  # also time until a process's speedup CI half-width is this small; 0 = off
    max_cv: float = 0.25  # a run whose processes' robust CV (IQR / 1.349 / median; median over processes) is
    #                       above this is `invalid` (too noisy); a few outliers do not count, a wide spread does
    max_halves_diff: float = 0.10  # a compiled run whose median process's speedup differs between the first and the
    #                                second half of its rounds by more than this (0.10 = 10%), by more than its
    #                                noise explains and one way in most processes (analysis.validity.halves_drift,
    #                                signed), is `invalid`: it drifted; 0 = not checked
    compile_cache: str = "cold"  # cold: a fresh inductor cache per run, warm afterwards | shared: the user's cache
    memory_limit_mib: float = 0.0  # CPU: resident memory of a trial's processes (with its compile workers), MiB;
    #                                CUDA: device memory it may add after loading its model; beyond: oom; 0 = no cap
    float32_matmul_precision: str = "highest"  # highest (no TF32, torch's default) | high (TF32 matmuls) | medium
    cudnn_allow_tf32: bool = True  # TF32 in cuDNN convolutions (torch's default, also in the doc's torch 2.0.1)
    cudnn_benchmark: bool = False  # cuDNN autotuning of convolution algorithms (torch's default: off)
    together: bool = True  # a block's processes (timing or cold; one per compared environment) alive together,
    #                        timing in alternating turns, so the machine's state falls on both alike; false: one
    #                        after the other
    huge_pages: bool = False  # CPU: torch's allocator asks the kernel for transparent huge pages for large tensors
    #                           (THP_MEM_ALLOC_ENABLE=1 in every trial process); false: torch's default
    malloc: str = "libc"  # CPU: whose malloc every trial process runs on: libc (the C library's), jemalloc or
    #                       tcmalloc (preloaded; Debian's libjemalloc2 / libtcmalloc-minimal4)

    def __post_init__(self) -> None:
        _require(
            bool(_DEVICE.match(self.device)), f"`benchmark.device` must be cpu, cuda or cuda:N, got {self.device!r}"
        )
        _require(self.dtype in DTYPES, f"`benchmark.dtype` must be one of {DTYPES}, got {self.dtype!r}")
        for key in ("num_threads", "warmup_iters", "cold_replicates"):
            _require(getattr(self, key) >= 0, f"`benchmark.{key}` must be >= 0, got {getattr(self, key)}")
        for key in ("min_iters", "memory_iters", "replicates"):
            _require(getattr(self, key) >= 1, f"`benchmark.{key}` must be >= 1, got {getattr(self, key)}")
        for key in ("min_time_s", "rtol", "target_ci_halfwidth", "max_cv", "memory_limit_mib", "warmup_s",
                    "max_halves_diff"):  # fmt: skip
            _require(getattr(self, key) >= 0, f"`benchmark.{key}` must be >= 0, got {getattr(self, key)}")
        _require(
            self.max_replicates >= self.replicates,
            f"`benchmark.max_replicates` ({self.max_replicates}) must be >= `benchmark.replicates` ({self.replicates})",
        )
        for key in ("budget_min", "disturbed_cores"):
            _require(getattr(self, key) >= 0, f"`benchmark.{key}` must be >= 0, got {getattr(self, key)}")
        _require(
            self.cold_replicates <= self.replicates,
            f"`benchmark.cold_replicates` ({self.cold_replicates}) must be <= `benchmark.replicates` "
            f"({self.replicates})",
        )
        _require(
            self.float32_matmul_precision in MATMUL_PRECISIONS,
            f"`benchmark.float32_matmul_precision` must be one of {MATMUL_PRECISIONS}, "
            f"got {self.float32_matmul_precision!r}",
        )
        _require(
            self.malloc in MALLOCS,
            f"`benchmark.malloc` must be one of {MALLOCS}, got {self.malloc!r}",
        )
        _require(
            self.compile_cache in COMPILE_CACHES,
            f"`benchmark.compile_cache` must be one of {COMPILE_CACHES}, got {self.compile_cache!r}",
        )
        _require(
            self.max_time_s >= self.min_time_s,
            f"`benchmark.max_time_s` ({self.max_time_s}) must be >= `benchmark.min_time_s` ({self.min_time_s})",
        )

    def timing(self) -> TimingSpec:
        """How a trial measures: this section's fields a trial takes, by name."""
        return TimingSpec(**{item.name: getattr(self, item.name) for item in fields(TimingSpec)})

    def validity(self) -> Validity:
        """The thresholds a run's processes are judged by: into the runs' context, an exported plan's loop and its
        export."""
        return Validity(**{item.name: getattr(self, item.name) for item in fields(Validity)})

    def loop(self, margin: float) -> LoopSettings:
        """What the adaptive loop needs of this section, with the config's `margin`."""
        return LoopSettings(replicates=self.replicates, cold_replicates=self.cold_replicates,
                            max_replicates=self.max_replicates, budget_min=self.budget_min,
                            disturbed_cores=self.disturbed_cores, target_speedup=self.target.speedup,
                            target_compile=self.target.compile, target_latency=self.target.latency,
                            margin=margin)  # fmt: skip


EXECUTORS = ("local", "gpus", "ray")


@dataclass
class Runner:
    machine: str = ""  # this machine's name in a shared MLflow store; "" = its hostname
    trial_timeout_s: float = 1800.0  # a trial process is ended after this many seconds (status timeout)
    executor: str = "local"  # local: one process at a time on this machine | gpus: this machine's GPUs as slots, a
    #                          cell at a time on each | ray: the slots of a Ray cluster (a GPU each; a CPU benchmark
    #                          takes a whole node per slot)
    ray_address: str = "auto"  # ray: the cluster to join (RAY_ADDRESS overrides); "local": start one for this run
    gpus: list[int] = field(default_factory=list)  # gpus: the GPU indices used as slots ([] = every GPU torch sees);
    #                                                ray with ray_address local: how many logical GPUs it has
    cpus_per_slot: int = 0  # threads and cores of a slot's trials; 0 = the node's cores shared among its slots
    parallel_cpu_slots: bool = False  # a CPU benchmark runs several slots of one machine at once (they measure each
    #                                   other: for tests of the dispatch, not for numbers)

    def __post_init__(self) -> None:
        _require(self.trial_timeout_s > 0, f"`runner.trial_timeout_s` must be > 0 seconds, got {self.trial_timeout_s}")
        _require(self.executor in EXECUTORS, f"`runner.executor` must be one of {EXECUTORS}, got {self.executor!r}")
        _require(self.cpus_per_slot >= 0, f"`runner.cpus_per_slot` must be >= 0, got {self.cpus_per_slot}")
        _require(all(gpu >= 0 for gpu in self.gpus), f"`runner.gpus` must be GPU indices (>= 0), got {self.gpus}")


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
    compare: list[str] = field(default_factory=lambda: [CURRENT])  # environments measured, interleaved
    margin: float = 0.10  # a B/A change within +-margin does not matter (`equivalent`); judged, not measured
    paths: Paths = field(default_factory=Paths)
    image: Image = field(default_factory=Image)
    models: Models = field(default_factory=Models)
    benchmark: Benchmark = field(default_factory=Benchmark)
    runner: Runner = field(default_factory=Runner)
    plot: Plot = field(default_factory=Plot)
    environments: dict[str, Environment] = field(default_factory=dict)
    variants: dict[str, Variant] = field(default_factory=dict)
    suites: dict[str, Suite] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(
            self.suite in self.suites or self.suite not in WINDOW_SUITES,
            f"`suite` {self.suite!r} was one of paper-bs1's three hand-made GPU windows; an export now splits any "
            "suite into windows: `python -m compilebench.benchmark --export DIR --set suite=paper-bs1 --window-min 11 "
            "--prime 8 ...` writes DIR-w1, DIR-w2, ... (docs/gpu.md)",
        )
        _require(
            self.suite in self.suites,
            f"`suite` must be one of {sorted(self.suites)} (the keys of `suites`), got {self.suite!r}",
        )
        _require(0 < self.margin < 1, f"`margin` must be in (0, 1) (0.05 = +-5%), got {self.margin}")
        _require(CURRENT in self.environments, f"`environments` must define `{CURRENT}`, the project's environment")
        for name, environment in self.environments.items():
            environment.check(name)
            self.benchmark_of(name)  # its settings checked as `benchmark`'s own are
        _require(
            bool(self.compare), f"`compare` must name at least one environment; defined: {sorted(self.environments)}"
        )
        for name in self.compare:
            _require(
                name in self.environments,
                f"`compare`: unknown environment {name!r}; defined: {sorted(self.environments)}",
            )
        self._check_labels()
        _require(EAGER in self.variants, f"`variants` must define `{EAGER}`, the baseline of every speedup")
        for name, variant in self.variants.items():
            variant.check(name)
        for name, suite in self.suites.items():
            self._check_suite(name, suite)
        runner = self.runner
        _require(
            runner.executor == "local" or self.benchmark.device.startswith("cuda") or runner.parallel_cpu_slots
            or (runner.executor == "ray" and runner.ray_address != "local"),
            f"`runner.executor: {self.runner.executor}` with `benchmark.device: {self.benchmark.device}` would run "
            "CPU trials side by side on one machine, measuring each other: use `executor: local`, or `ray` across "
            "machines (a CPU benchmark takes a whole node per slot); `runner.parallel_cpu_slots: true` allows it",
        )  # fmt: skip

    def benchmark_of(self, name: str) -> Benchmark:
        """`benchmark` as environment `name`'s processes run it: with its settings in place of `benchmark`'s."""
        given = self.environments[name].settings.given()
        try:
            return replace(self.benchmark, **given)  # checked again, as a Benchmark is
        except ConfigError as error:  # its message names `benchmark.KEY`: here the setting is the environment's
            raise ConfigError(str(error).replace("`benchmark.", f"`environments.{name}.settings.")) from None

    def _check_labels(self) -> None:
        """Compared environments whose labels would share a metric key (`a#2` and `a_2` both become `a_2`) are
        refused: one would overwrite the other's headline metrics."""
        seen: dict[str, str] = {}
        for label in environment_labels(self.compare):
            other = seen.setdefault(key_part(label), label)
            _require(
                other == label,
                f"`compare`: environments {other!r} and {label!r} would share the metric key {key_part(label)!r} "
                "(characters other than letters, digits, _ - . and space become _): rename one",
            )

    def _check_suite(self, name: str, suite: Suite) -> None:
        from compilebench.harness.models import CardError, registered_ids  # cards are data: read lazily

        try:
            known = registered_ids()
        except CardError as error:
            raise ConfigError(str(error)) from None
        _require(bool(suite.models), f"`suites.{name}.models` must name at least one model")
        for model_id in suite.models:
            _require(
                model_id in known or is_local(model_id) or bool(_HUB_ID.match(model_id)),
                f"`suites.{name}.models`: {model_id!r} is neither a Hub id (owner/name) nor a local folder (a path "
                f"starting with {' '.join(LOCAL_PREFIXES)}); carded: {known}",
            )
            _require(
                suite.scale == "full" or model_id in known,
                f"`suites.{name}.models`: {model_id!r} has no card, and `scale: {suite.scale}` builds a card's small "
                f"config; use `scale: full` for it (carded: {known})",
            )
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
        _require(suite.cells in CELLS, f"`suites.{name}.cells` must be one of {CELLS}, got {suite.cells!r}")

    @property
    def selected(self) -> Suite:
        """The suite that runs."""
        return self.suites[self.suite]

    def check_selected_variants(self) -> None:
        """The selected suite's inductor options exist in this torch (imports torch)."""
        for name in self.selected.variants:
            try:
                self.variants[name].check_inductor_options(name)
            except ConfigError as error:
                raise ConfigError(f"params: {error}") from None


def load_config(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Config:
    """Read params.yaml (plus `key=value` overrides), validate it against the schema, return typed objects."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"params file {str(path)!r} does not exist")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {error.start} is {error.object[error.start : error.start + 1]!r}); "
            "save it as UTF-8"
        ) from None
    try:
        raw = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
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


OUTSIDE_DVC = ("environments", "calibration", "store")  # paths.* kept by the project, not by DVC's outputs


def home() -> Path:
    """The project's own folder: where the stage runs, or, for an experiment DVC runs in a temporary copy of the
    project (`dvc exp run --queue`, `--temp`), the project it copied (DVC names it in DVC_ROOT). DVC deletes the copy
    afterwards, with anything written into it that is not an output it collects."""
    root = os.environ.get("DVC_ROOT")
    return Path(root) if root else Path.cwd()


def at_home(config: Config) -> Config:
    """`config` with the paths the project keeps outside DVC (the MLflow store, built environments, the noise record,
    the store's tables) made absolute in `home()`, so that an experiment run in DVC's temporary copy logs into the
    project's own store, reuses its environments and adds to its noise record, and they outlive the copy."""
    base = home()
    if base.resolve() == Path.cwd().resolve():
        return config
    for key in OUTSIDE_DVC:
        value = getattr(config.paths, key)
        if not Path(value).is_absolute():
            setattr(config.paths, key, str(base / value))
    uri = config.paths.tracking_uri
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_absolute():
        config.paths.tracking_uri = f"sqlite:///{base / uri.removeprefix('sqlite:///')}"
    return config


def check_compile_paths(*paths: Path) -> None:
    """Refuse, before any work, paths torch's inductor cannot compile under: it hands include paths and cache
    folders (the venv's and the project's) to the C++ compiler unquoted, so with a space in them every compiled
    run would end `compile_error`."""
    for path in paths:
        _require(
            not any(character.isspace() for character in str(path)),
            f"{str(path)!r} contains a space: torch's inductor passes the venv's and the project's paths to the C++ "
            "compiler unquoted, so every compiled run would fail; clone or move the project to a path without spaces",
        )


def stage_config(overrides: list[str] | None = None, compiles: bool = False) -> Config:
    """Every stage command's prologue: log to stderr (credentials redacted: logs.configure), then validate
    params.yaml (and, for the stages that compile, the selected variants' inductor options); a bad params file is
    one clear error and exit 2, before any work."""
    logs.configure()
    try:
        config = at_home(load_config(overrides=overrides))
        if compiles:
            config.check_selected_variants()
            check_compile_paths(Path.cwd(), Path(sys.prefix))
    except ConfigError as error:
        logging.getLogger("compilebench").error("%s", error)
        sys.exit(2)
    return config


def main() -> None:
    config = load_config(sys.argv[1] if len(sys.argv) > 1 else "params.yaml")
    print(OmegaConf.to_yaml(OmegaConf.structured(config)))


if __name__ == "__main__":
    main()
