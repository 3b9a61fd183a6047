"""The sections of params.yaml, each a typed record beside its checks of meaning (config/__init__.py holds them together
as `Config`). A key params.yaml leaves out takes the default written here; every key, written or not, is validated,
and a check names the key and what is allowed. `python -m compilebench.config` prints every key with its value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from compilebench.records.formats import CPU_ISAS, CURRENT, MALLOC_LIBRARIES
from compilebench.records.invocation import LoopSettings, Validity

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DTYPES = ("float32", "bfloat16", "float16")
WEIGHTS_CHOICES = ("auto", "hub", "random-init")
COMPILE_CACHES = ("cold", "shared")
MALLOCS = ("libc", *MALLOC_LIBRARIES)  # settings.malloc: whose malloc the trial processes run on
SCALES = ("full", "tiny")
CELLS = ("all", "published")
DEPLOYS = ("jit", "artifacts", "aoti", "regional")
DYNAMICS = (True, False, None, "batch", "batch-unbacked")  # variants.*.dynamic (records.DYNAMIC_BATCH*)
MATMUL_PRECISIONS = ("highest", "high", "medium")
EXECUTORS = ("local", "gpus", "ray")
EAGER = "eager"
DOC_MODELS = "doc"  # in a suite's `models`: the doc's 12 checkpoints (the cards, by Hub id)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")
_PYTHON = re.compile(r"^3\.\d+(\.\d+)?$")


class ConfigError(ValueError):
    """A params file that does not match the schema; the message names the key and what is allowed."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass
class Paths:
    image: str = "data/image/input.jpg"  # the benchmark image (COCO or the embedded fallback)
    image_meta: str = "data/image/input.json"  # where the image came from, its size and sha256
    checkpoints: str = "data/checkpoints"  # one folder per model, plus manifest.json
    manifest: str = "data/checkpoints/manifest.json"  # what load_models materialised, and from where
    selection: str = "data/selection.json"  # the models, variants and environments the benchmark measures
    environments: str = ".compilebench/environments"  # built environments (venvs), one per resolved set of pins
    results: str = "data/results/runs.jsonl"  # one JSON line per (model, batch, variant) run, raw samples kept
    journal: str = "data/journal"  # completed trials of an interrupted benchmark, for resuming; after one that ended,
    #                                its warm inductor caches, which explain profiles on (not a DVC output)
    run_info: str = "data/results/run_info.json"  # the MLflow parent run of this pipeline invocation
    summary: str = "data/results/summary.csv"  # eager vs compiled table
    reference: str = "data/reference/published.csv"  # the doc's published numbers
    gpu_costs: str = "data/reference/gpu-costs.json"  # per-model process costs measured on a GPU (--export's estimate)
    verdicts: str = "data/results/verdicts.csv"  # each compiled run against the published numbers
    comparison: str = "data/results/comparison.csv"  # environments compared in one invocation, interleaved
    calibration: str = "data/calibration.json"  # the noise record: paired blocks' noise per machine, pooled
    explain: str = "data/explain"  # why a compiled cell changed: profiles A beside B and their report (not DVC's)
    bisect: str = "data/bisect"  # one folder per bisect: its journal, each round's tables, the answer (not DVC's)
    store: str = "data/store"  # tables and figures read back from the MLflow store (not a DVC output)
    report: str = "data/report/report.md"  # the run's report, with its figures
    metrics: str = "data/results/metrics.json"  # dvc metrics
    cells: str = "data/results/cells.json"  # dvc metrics: per compared cell and metric, B/A, its CI, the verdict code
    plots: str = "data/plots"  # PNG figures
    tracking_uri: str = "sqlite:///mlruns/mlflow.db"  # MLflow store; MLFLOW_TRACKING_URI overrides

    def __post_init__(self) -> None:
        for key, value in vars(self).items():
            require(bool(value), f"`paths.{key}` must be a non-empty path, got {value!r}")

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
        require(
            self.url.startswith(("http://", "https://")),
            f"`image.url` must start with http:// or https://, got {self.url!r} (a local file goes in `image.file`)",
        )
        require(self.file is None or bool(self.file.strip()), "`image.file` must be a path or null, got ''")
        require(
            self.sha256 is None or bool(_SHA256.match(self.sha256)),
            f"`image.sha256` must be 64 lowercase hex characters or null, got {self.sha256!r}",
        )
        for key in ("max_bytes", "max_pixels", "timeout_s"):
            require(getattr(self, key) > 0, f"`image.{key}` must be > 0, got {getattr(self, key)}")


@dataclass
class Models:
    weights: str = "auto"  # auto: Hub or local HF cache, else random-init | hub: fail when offline | random-init
    seed: int = 0  # RNG seed for random-init weights
    text_queries: list[str] = field(default_factory=lambda: ["a photo of a cat", "a photo of a dog"])  # zero-shot
    #                  detection models without a card (a card holds its own)

    def __post_init__(self) -> None:
        require(
            self.weights in WEIGHTS_CHOICES, f"`models.weights` must be one of {WEIGHTS_CHOICES}, got {self.weights!r}"
        )
        require(
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
        key = f"`variants.{name}"
        require(self.mode in COMPILE_MODES, f"{key}.mode` must be one of {COMPILE_MODES}, got {self.mode!r}")
        require(name == EAGER or self.compile, f"{key}.compile` is false: only the `{EAGER}` variant may be eager")
        require(name != EAGER or not self.compile, f"`variants.{EAGER}.compile` must be false")
        require(
            self.dtype is None or self.dtype in DTYPES,
            f"{key}.dtype` must be null or one of {DTYPES}, got {self.dtype!r}",
        )
        require(self.deploy in DEPLOYS, f"{key}.deploy` must be one of {DEPLOYS}, got {self.deploy!r}")
        require(
            self.dynamic in DYNAMICS,
            f"{key}.dynamic` must be one of true, false, null, batch, batch-unbacked; got {self.dynamic!r}",
        )
        require(
            not self.serve or (self.compile and self.deploy == "jit"),
            f"{key}.serve` needs a compiled variant with deploy jit (a package or region serves no sizes)",
        )
        require(
            self.deploy != "aoti" or (self.mode == "default" and not self.dynamic),
            f"{key}`: deploy aoti takes no compile mode or dynamic shapes (its options go in `inductor`)",
        )
        require(
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
            require(
                hasattr(inductor_config, option.split(".")[0]),
                f"`variants.{name}.inductor.{option}` is not a torch._inductor.config option",
            )


@dataclass
class Settings:
    """How a process is started or set up: the one place each such setting is set. Top-level `settings` is every
    environment's; an environment's own `settings` override it for its processes (so a comparison can weigh two
    settings on one stack, its processes alive together as two stacks' are). Null: torch's default."""

    num_threads: int | None = None  # torch intra-op threads; 0 or null = one per core
    huge_pages: bool | None = None  # CPU: torch's allocator asks for transparent huge pages (THP_MEM_ALLOC_ENABLE=1)
    malloc: str | None = None  # CPU: libc (null), jemalloc or tcmalloc, preloaded in every trial process
    float32_matmul_precision: str | None = None  # highest (null: no TF32, torch's default) | high (TF32) | medium
    cudnn_allow_tf32: bool | None = None  # TF32 in cuDNN convolutions (null: torch's default, true)
    cudnn_benchmark: bool | None = None  # cuDNN autotuning of convolution algorithms (null: torch's default, off)
    cpu_isa: str | None = None  # CPU: sse41 | avx2 | avx512, the widest vector instructions torch's and oneDNN's
    #                             kernels may use (null: all the machine has); what AVX-512 buys a model, on one stack

    def given(self) -> dict[str, Any]:
        """The settings this section sets, by name."""
        return {item.name: getattr(self, item.name) for item in fields(self) if getattr(self, item.name) is not None}

    def check(self, where: str) -> None:
        """Validate what it sets; `where` is its key (`settings`, `environments.NAME.settings`)."""
        require(
            self.num_threads is None or self.num_threads >= 0,
            f"`{where}.num_threads` must be >= 0, got {self.num_threads}",
        )
        require(
            self.malloc is None or self.malloc in MALLOCS,
            f"`{where}.malloc` must be one of {MALLOCS}, got {self.malloc!r}",
        )
        require(
            self.cpu_isa is None or self.cpu_isa in CPU_ISAS,
            f"`{where}.cpu_isa` must be one of {tuple(CPU_ISAS)} or null (all the machine has), got {self.cpu_isa!r}",
        )
        require(
            self.float32_matmul_precision is None or self.float32_matmul_precision in MATMUL_PRECISIONS,
            f"`{where}.float32_matmul_precision` must be one of {MATMUL_PRECISIONS}, got "
            f"{self.float32_matmul_precision!r}",
        )


@dataclass
class Environment:
    pins: dict[str, str] = field(default_factory=dict)  # package -> version, over the project's own pins
    settings: Settings = field(default_factory=Settings)  # where its processes run unlike top-level `settings` says
    python: str = ""  # the Python it is built on, e.g. '3.10' (pyenv's or python3.10 on PATH); '' = the project's

    def check(self, name: str) -> None:
        """Validate this environment; `name` is its key under `environments`."""
        require(
            name != CURRENT or not self.pins,
            f"`environments.{CURRENT}` is the project's own environment (constraints.txt, requirements.txt): "
            f"it takes no pins; name another environment for {dict(self.pins)}",
        )
        require(
            name != CURRENT or not self.settings.given(),
            f"`environments.{CURRENT}` runs as top-level `settings` says: it takes no settings of its own; set "
            f"`settings` itself, or name another environment for {self.settings.given()}",
        )
        require(
            name == CURRENT or bool(self.pins) or bool(self.settings.given()),
            f"`environments.{name}` must pin at least one package (e.g. `pins: {{torch: '2.14.1'}}`) or set at "
            f"least one of {[item.name for item in fields(Settings)]} (e.g. `settings: {{malloc: tcmalloc}}`)",
        )
        for package, version in self.pins.items():
            require(bool(_PACKAGE.match(package)), f"`environments.{name}.pins`: {package!r} is not a package name")
            require(
                bool(_VERSION.match(str(version))),
                f"`environments.{name}.pins.{package}` must be an exact version such as '2.14.1', got {version!r}",
            )
        self.settings.check(f"environments.{name}.settings")
        require(
            not self.python or bool(self.pins),
            f"`environments.{name}.python` needs pins of its own: an environment of settings alone runs on "
            f"{CURRENT}'s interpreter",
        )
        require(
            not self.python or bool(_PYTHON.match(self.python)),
            f"`environments.{name}.python` must be a Python version such as '3.10', got {self.python!r}",
        )


@dataclass
class Suite:
    models: list[str] = field(default_factory=list)  # carded Hub ids, any image checkpoint's Hub id, local folders;
    #                                                  `doc`: the doc's 12 checkpoints
    batch_sizes: list[int] = field(default_factory=lambda: [1])  # images per forward pass
    variants: list[str] = field(default_factory=lambda: [EAGER, "default"])  # keys of `variants`; eager required
    scale: str = "full"  # full: the published architecture | tiny: the card's small config (smoke tests)
    cells: str = "all"  # all: every model x batch size x variant | published: only those a published number can
    #                     judge (reference.published_cells): a GPU plan spent on the doc's cells alone


@dataclass
class Target:
    """The 95% CI half-width a cell is measured to (0.05 = +-5%), per kind of metric; 0 = no target for that kind."""

    speedup: float = 0.05  # speedup, and B/A of speedup
    compile: float = 0.05  # cold and warm compile time
    latency: float = 0.10  # eager and compiled latency

    def __post_init__(self) -> None:
        for key in ("speedup", "compile", "latency"):
            value = getattr(self, key)
            require(0 <= value < 1, f"`benchmark.target.{key}` must be in [0, 1) (0.05 = +-5%), got {value}")


@dataclass
class Benchmark:
    """What is measured and how: every key of it is part of the result. Those params.yaml leaves out keep these
    defaults (`dvc exp run -S ++benchmark.KEY=VALUE` sets one)."""

    dtype: str = "float32"  # float32 | bfloat16 | float16 (model and inputs)
    replicates: int = 3  # blocks every run gets first: a fresh process per environment each (undisturbed ones)
    max_replicates: int = 10  # blocks a run may get at most, when its intervals are still wider than `target`
    cold_replicates: int = 1  # of them, how many compile on an empty inductor cache (the rest on its warm cache)
    target: Target = field(default_factory=Target)  # CI half-widths more blocks aim for, widest cells first
    seed: int = 0  # seed of the run order (shuffled per round; environments interleaved in balanced blocks)
    compile_cache: str = "cold"  # cold: a fresh inductor cache per run, warm afterwards | shared: the user's cache
    memory_limit_mib: float = 0.0  # CPU: resident memory of a trial's processes (with its compile workers), MiB;
    #                                CUDA: device memory it may add after loading its model; beyond: oom; 0 = no cap
    disturbed_cores: float = 0.25  # a process is disturbed (re-run in a new block) when other processes used more
    #                                than this many cores on average while it timed, or the VM lost as much to steal
    warmup_iters: int = 2  # untimed calls after the first call, per process (at least 3 for CUDA-graph variants)
    warmup_s: float = 1.0  # right before timing, untimed rounds of every arm for at least this many seconds, longer
    #                        (up to 5x) while the last rounds still run faster than the ones before
    min_iters: int = 10  # timed pairs (eager, compiled) per process, at least
    min_time_s: float = 10.0  # timed seconds per process, at least (why 10: docs/findings.md, 2026-12-01)
    max_time_s: float = 60.0  # stop timing a process after this many seconds, even below min_iters
    memory_iters: int = 1  # calls measured alone for peak memory, per process
    rtol: float = 1e-3  # compiled vs eager output: max |diff| / max |eager| allowed (float32; x50 for 16-bit)
    target_ci_halfwidth: float = 0.0  # also time until a process's speedup CI half-width is this small; 0 = off
    max_cv: float = 0.25  # a run whose processes' robust CV (IQR / 1.349 / median; median over processes) is
    #                       above this is `invalid` (too noisy); a few outliers do not count, a wide spread does
    max_halves_diff: float = 0.10  # a compiled run whose median process's speedup differs between the first and the
    #                                second half of its rounds by more than this, beyond its noise and one way in most
    #                                processes (analysis.validity.halves_drift), is `invalid`: it drifted; 0 = off
    together: bool = True  # a block's processes (timing or cold; one per compared environment) alive together,
    #                        timing in alternating turns, so the machine's state falls on both alike

    def __post_init__(self) -> None:
        require(self.dtype in DTYPES, f"`benchmark.dtype` must be one of {DTYPES}, got {self.dtype!r}")
        for key in ("warmup_iters", "cold_replicates"):
            require(getattr(self, key) >= 0, f"`benchmark.{key}` must be >= 0, got {getattr(self, key)}")
        for key in ("min_iters", "memory_iters", "replicates"):
            require(getattr(self, key) >= 1, f"`benchmark.{key}` must be >= 1, got {getattr(self, key)}")
        for key in (
            "min_time_s",
            "rtol",
            "target_ci_halfwidth",
            "max_cv",
            "memory_limit_mib",
            "warmup_s",
            "max_halves_diff",
            "disturbed_cores",
        ):
            require(getattr(self, key) >= 0, f"`benchmark.{key}` must be >= 0, got {getattr(self, key)}")
        require(
            self.max_replicates >= self.replicates,
            f"`benchmark.max_replicates` ({self.max_replicates}) must be >= `benchmark.replicates` ({self.replicates})",
        )
        require(
            self.cold_replicates <= self.replicates,
            f"`benchmark.cold_replicates` ({self.cold_replicates}) must be <= `benchmark.replicates` "
            f"({self.replicates})",
        )
        require(
            self.compile_cache in COMPILE_CACHES,
            f"`benchmark.compile_cache` must be one of {COMPILE_CACHES}, got {self.compile_cache!r}",
        )
        require(
            self.max_time_s >= self.min_time_s,
            f"`benchmark.max_time_s` ({self.max_time_s}) must be >= `benchmark.min_time_s` ({self.min_time_s})",
        )

    def validity(self) -> Validity:
        """The thresholds a run's processes are judged by: into the runs' context, an exported plan's loop and its
        export."""
        return Validity(**{item.name: getattr(self, item.name) for item in fields(Validity)})

    def loop(self, margin: float, budget_min: float) -> LoopSettings:
        """What the adaptive loop needs of this section, with the config's `margin` and `budget_min`."""
        return LoopSettings(
            replicates=self.replicates,
            cold_replicates=self.cold_replicates,
            max_replicates=self.max_replicates,
            budget_min=budget_min,
            disturbed_cores=self.disturbed_cores,
            target_speedup=self.target.speedup,
            target_compile=self.target.compile,
            target_latency=self.target.latency,
            margin=margin,
        )


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
        require(self.trial_timeout_s > 0, f"`runner.trial_timeout_s` must be > 0 seconds, got {self.trial_timeout_s}")
        require(self.executor in EXECUTORS, f"`runner.executor` must be one of {EXECUTORS}, got {self.executor!r}")
        require(self.cpus_per_slot >= 0, f"`runner.cpus_per_slot` must be >= 0, got {self.cpus_per_slot}")
        require(all(gpu >= 0 for gpu in self.gpus), f"`runner.gpus` must be GPU indices (>= 0), got {self.gpus}")


@dataclass
class Plot:
    dpi: int = 120  # PNG resolution, dots per inch
    width_in: float = 10.0  # figure width, inches

    def __post_init__(self) -> None:
        require(self.dpi > 0, f"`plot.dpi` must be > 0, got {self.dpi}")
        require(self.width_in > 0, f"`plot.width_in` must be > 0, got {self.width_in}")


# Suites and the variants they alone use, built in: params.yaml names the ones a user edits most, and may name one of
# these too (its fields over these). `python -m compilebench.config` prints them all.
BUILT_IN_VARIANTS = {
    "max-autotune-freezing": Variant(mode="max-autotune", inductor={"freezing": True}),  # a CPU tunes with freezing
    "freezing-bf16": Variant(inductor={"freezing": True}, dtype="bfloat16"),  # against the float32 eager baseline
    "freezing-channels-last": Variant(inductor={"freezing": True}, channels_last=True),  # NHWC
    "cpp-wrapper": Variant(inductor={"freezing": True, "cpp_wrapper": True}),  # C++ wrapper code around the kernels
    "fullgraph": Variant(fullgraph=True),  # fails, naming the graph break, where the model has one
    "artifacts": Variant(deploy="artifacts"),  # warm processes load the cold one's portable cache artifacts
    "aoti": Variant(deploy="aoti", inductor={"freezing": True}),  # AOTInductor: built once, loaded by the warm ones
    "regional": Variant(deploy="regional"),  # torch.compile of each repeated block only
    "serve-static": Variant(serve=True),  # each process serves every batch size of the suite, a graph each
    "serve-auto": Variant(serve=True, dynamic=None),  # torch's default: dynamic at the recompile a change causes
    "serve-dynamic": Variant(serve=True, dynamic="batch"),  # dim 0 marked dynamic: batch 1 still its own graph
    "serve-unbacked": Variant(serve=True, dynamic="batch-unbacked"),  # dim 0 unbacked: one graph if it compiles
}
_RESNET, _VIT, _SEGFORMER = (
    "microsoft/resnet-50",
    "google/vit-base-patch16-224",
    "nvidia/segformer-b0-finetuned-ade-512-512",
)
BUILT_IN_SUITES = {
    "cpu-full": Suite(
        [_RESNET, _VIT, _SEGFORMER, "google/deeplabv3_mobilenet_v2_1.0_513", "facebook/detr-resnet-50"],
        variants=[EAGER, "default", "freezing"],
    ),  # all three tasks: adds DeepLabV3 and DETR
    "cpu-variants": Suite(
        [_RESNET, "facebook/detr-resnet-50"],
        variants=[
            EAGER,
            "default",
            "freezing",
            "max-autotune-freezing",
            "freezing-bf16",
            "freezing-channels-last",
            "cpp-wrapper",
        ],
    ),  # which CPU compile options pay
    "startup": Suite(
        [_RESNET, _VIT], variants=[EAGER, "default", "fullgraph", "artifacts", "aoti", "regional"]
    ),  # time to first inference per way of deploying
    "dynamic-batch": Suite(
        [_RESNET, _VIT], [1, 4, 16], [EAGER, "default", "serve-auto", "serve-dynamic", "serve-unbacked"]
    ),  # one compiled model, batch 1, 4, 16
}
