"""One typed schema for params.yaml, validated at load: `Config`, its sections in config/sections.py.

    python -m compilebench.config [params.yaml]    # validate, and print every key with its value (defaults included)

A wrong type or an unknown key fails in OmegaConf and names the key; checks of meaning live in the sections and here,
and name the key and what is allowed. A key moved since an earlier params.yaml is named with its new place. Every
stage calls `stage_config()` first, before any work.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from compilebench import logs
from compilebench.config.sections import (
    BUILT_IN_SUITES,
    BUILT_IN_VARIANTS,
    DOC_MODELS,
    EAGER,
    Benchmark,
    ConfigError,
    Environment,
    Image,
    Models,
    Paths,
    Plot,
    Runner,
    Settings,
    Suite,
    Variant,
    require,
)
from compilebench.harness.names import LOCAL_PREFIXES, is_local
from compilebench.records.formats import CURRENT, ModelSpec, TimingSpec, VariantSpec, environment_labels, key_part
from compilebench.records.invocation import LoopSettings, Validity
from compilebench.records.selection import SelectedEnvironment, Selection

__all__ = [
    "Benchmark",
    "Config",
    "ConfigError",
    "Environment",
    "Settings",
    "Suite",
    "Variant",
    "check_compile_paths",
    "home",
    "load_config",
    "stage_config",
]

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
# Keys moved since an earlier params.yaml, and where they are now: named in the error a file that still has them gets.
MOVED = {
    "benchmark.device": "device",
    "benchmark.budget_min": "budget_min",
    **{
        f"benchmark.{name}": f"settings.{name}"
        for name in (
            "num_threads",
            "huge_pages",
            "malloc",
            "float32_matmul_precision",
            "cudnn_allow_tf32",
            "cudnn_benchmark",
        )
    },
}
# Suites that were folded into others, and how to ask for what they measured.
FOLDED = {
    "paper-bs1": "`suite: paper` with `suites.paper.batch_sizes: [1]` and `suites.paper.cells: published`",
    "paper-bs4-16": "`suite: paper` with `suites.paper.batch_sizes: [4, 16]` and `suites.paper.cells: published`",
    "gpu-bs16": "`suite: gpu` with `suites.gpu.batch_sizes: [16]` and `suites.gpu.cells: published`",
    **{
        f"paper-bs1-w{n}": "an export split into windows: `--export DIR --window-min M` (docs/gpu.md)"
        for n in (1, 2, 3)
    },
}


@dataclass
class Config:
    suite: str = "cpu"  # key of `suites` that runs
    compare: list[str] = field(default_factory=lambda: [CURRENT])  # environments measured, interleaved
    margin: float = 0.10  # a B/A change within +-margin does not matter (`equivalent`); judged, not measured
    device: str = "cpu"  # cpu | cuda | cuda:N
    budget_min: float = 10.0  # minutes of the blocks' wall time per compared environment: the first `replicates`
    #                            blocks always run, more (widest CIs first) only while they fit
    paths: Paths = field(default_factory=Paths)
    image: Image = field(default_factory=Image)
    models: Models = field(default_factory=Models)
    settings: Settings = field(default_factory=Settings)  # how every process runs; an environment's own override it
    benchmark: Benchmark = field(default_factory=Benchmark)
    runner: Runner = field(default_factory=Runner)
    plot: Plot = field(default_factory=Plot)
    environments: dict[str, Environment] = field(default_factory=dict)
    variants: dict[str, Variant] = field(default_factory=lambda: dict(BUILT_IN_VARIANTS))  # params.yaml's beside
    suites: dict[str, Suite] = field(default_factory=lambda: dict(BUILT_IN_SUITES))  # params.yaml's beside

    def __post_init__(self) -> None:
        require(
            self.suite in self.suites or self.suite not in FOLDED,
            f"`suite` {self.suite!r} is now {FOLDED.get(self.suite)}",
        )
        require(
            self.suite in self.suites,
            f"`suite` must be one of {sorted(self.suites)} (the keys of `suites`), got {self.suite!r}",
        )
        require(0 < self.margin < 1, f"`margin` must be in (0, 1) (0.05 = +-5%), got {self.margin}")
        require(bool(_DEVICE.match(self.device)), f"`device` must be cpu, cuda or cuda:N, got {self.device!r}")
        require(self.budget_min >= 0, f"`budget_min` must be >= 0 minutes, got {self.budget_min}")
        self.settings.check("settings")
        require(CURRENT in self.environments, f"`environments` must define `{CURRENT}`, the project's environment")
        self._add_releases()
        for name, environment in self.environments.items():
            environment.check(name)
        require(
            bool(self.compare), f"`compare` must name at least one environment; defined: {sorted(self.environments)}"
        )
        for name in self.compare:
            require(
                name in self.environments,
                f"`compare`: unknown environment {name!r}; defined: {sorted(self.environments)}, or any torch "
                "release as torch-X.Y.Z (e.g. torch-2.6.0), a transformers one as transformers-X.Y.Z",
            )
        self._check_labels()
        require(EAGER in self.variants, f"`variants` must define `{EAGER}`, the baseline of every speedup")
        for name, variant in self.variants.items():
            variant.check(name)
        for name, suite in self.suites.items():
            self._check_suite(name, suite)
        runner = self.runner
        require(
            runner.executor == "local"
            or self.device.startswith("cuda")
            or runner.parallel_cpu_slots
            or (runner.executor == "ray" and runner.ray_address != "local"),
            f"`runner.executor: {self.runner.executor}` with `device: {self.device}` would run CPU trials side by "
            "side on one machine, measuring each other: use `executor: local`, or `ray` across machines (a CPU "
            "benchmark takes a whole node per slot); `runner.parallel_cpu_slots: true` allows it",
        )

    def _add_releases(self) -> None:
        """Each `torch-X.Y.Z` in `compare` that `environments` does not define becomes that release with the
        companions it needs, resolved over the whole series, and each `transformers-X.Y.Z` that transformers on the
        project's torch (`releases.resolve_series`)."""
        import platform
        from importlib import metadata

        from compilebench.config import releases

        try:
            transformers = metadata.version("transformers")
        except metadata.PackageNotFoundError:
            transformers = releases.NEWEST_FOR_FLOOR["2.7"][0]
        try:
            resolved = releases.resolve_series(
                self.compare, set(self.environments), transformers, platform.python_version()
            )
        except releases.ReleaseError as error:
            raise ConfigError(f"`compare`: {error}") from None
        for name, release in resolved.items():
            self.environments[name] = Environment(pins=dict(release.pins), python=release.python)

    def settings_of(self, name: str) -> dict[str, Any]:
        """What environment `name`'s processes are set up with where it differs from torch's defaults: top-level
        `settings`, with its own over them."""
        return {**self.settings.given(), **self.environments[name].settings.given()}

    def timing(self, name: str = CURRENT) -> TimingSpec:
        """How a trial of environment `name` measures: `benchmark`'s fields a trial takes, the device, its settings."""
        taken = {item.name for item in fields(TimingSpec)}
        measured = {item.name: getattr(self.benchmark, item.name) for item in fields(Benchmark) if item.name in taken}
        return TimingSpec(**measured, device=self.device, **self.settings_of(name))

    def validity(self) -> Validity:
        return self.benchmark.validity()

    def compared_pins(self) -> dict[str, dict[str, str]]:
        """Each compared environment's own pins, by name, once each in `compare`'s order (pins.resolved_pins lays
        them over the project's)."""
        return {name: dict(self.environments[name].pins) for name in dict.fromkeys(self.compare)}

    def selection(
        self, specs: list[ModelSpec], pins: dict[str, dict[str, str]], cells: list[tuple[str, int, str]] | None
    ) -> Selection:
        """What the benchmark measures: models and their checkpoint folders, batch sizes, variants, environments, and
        (for a suite with `cells: published`) the (model id, batch size, variant) cells measured.

        `specs` is each selected model with its checkpoint folder, `pins` each environment's resolved pins by name
        (pins.resolved_pins), `cells` reference.published_cells's or None."""
        suite = self.selected
        return Selection(
            suite=self.suite,
            scale=suite.scale,
            batch_sizes=tuple(suite.batch_sizes),
            models=tuple(specs),
            variants=tuple(VariantSpec(name=name, **asdict(self.variants[name])) for name in suite.variants),
            environments=tuple(
                SelectedEnvironment(
                    label=label,
                    name=name,
                    pins=pins[name],
                    settings=self.environments[name].settings.given(),
                    stack=name if self.environments[name].pins else CURRENT,  # whose interpreter runs it
                    python=self.environments[name].python,  # the Python it is built on ('' = the project's)
                )
                for label, name in zip(environment_labels(self.compare), self.compare, strict=True)
            ),
            cells=None if cells is None else tuple((m, int(b), v) for m, b, v in sorted(cells)),
        )

    def loop(self) -> LoopSettings:
        """What the adaptive loop needs: `benchmark`'s blocks and targets, `margin` and `budget_min`."""
        return self.benchmark.loop(self.margin, self.budget_min)

    def _check_labels(self) -> None:
        """Compared environments whose labels would share a metric key (`a#2` and `a_2` both become `a_2`) are
        refused: one would overwrite the other's headline metrics."""
        seen: dict[str, str] = {}
        for label in environment_labels(self.compare):
            other = seen.setdefault(key_part(label), label)
            require(
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
        if DOC_MODELS in suite.models:  # the doc's checkpoints, where the word stands
            at = suite.models.index(DOC_MODELS)
            suite.models = [*suite.models[:at], *known, *suite.models[at + 1 :]]
        require(bool(suite.models), f"`suites.{name}.models` must name at least one model")
        for model_id in suite.models:
            require(
                model_id in known or is_local(model_id) or bool(_HUB_ID.match(model_id)),
                f"`suites.{name}.models`: {model_id!r} is neither a Hub id (owner/name), nor a local folder (a "
                f"path starting with {' '.join(LOCAL_PREFIXES)}), nor `{DOC_MODELS}`; carded: {known}",
            )
            require(
                suite.scale == "full" or model_id in known,
                f"`suites.{name}.models`: {model_id!r} has no card, and `scale: {suite.scale}` builds a card's "
                f"small config; use `scale: full` for it (carded: {known})",
            )
        require(
            len(set(suite.models)) == len(suite.models), f"`suites.{name}.models` lists a model twice: {suite.models}"
        )
        require(bool(suite.batch_sizes), f"`suites.{name}.batch_sizes` must not be empty")
        require(
            all(batch_size >= 1 for batch_size in suite.batch_sizes),
            f"`suites.{name}.batch_sizes` must all be >= 1, got {suite.batch_sizes}",
        )
        require(
            EAGER in suite.variants,
            f"`suites.{name}.variants` must include `{EAGER}` (the baseline), got {suite.variants}",
        )
        for variant in suite.variants:
            require(
                variant in self.variants,
                f"`suites.{name}.variants`: unknown variant {variant!r}; defined: {sorted(self.variants)}",
            )
        from compilebench.config.sections import CELLS, SCALES

        require(suite.scale in SCALES, f"`suites.{name}.scale` must be one of {SCALES}, got {suite.scale!r}")
        require(suite.cells in CELLS, f"`suites.{name}.cells` must be one of {CELLS}, got {suite.cells!r}")

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


def moved_keys(raw: Any) -> list[str]:
    """The keys of a params file (an OmegaConf tree) that moved since: each with its new place."""
    found = []
    for old, new in MOVED.items():
        section, key = old.split(".")
        if isinstance(raw.get(section), dict) and key in raw[section]:
            found.append(f"`{old}` is now `{new}`")
    return found


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
        moved = moved_keys(OmegaConf.to_container(raw)) + [
            f"`{key}` is now `{MOVED[key]}`"
            for key in (item.split("=", 1)[0].lstrip("+") for item in overrides or [])
            if key in MOVED
        ]
        if moved:
            raise ConfigError(f"{path}: {'; '.join(moved)} (the keys a user sets come first in params.yaml)")
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
        require(
            not any(character.isspace() for character in str(path)),
            f"{str(path)!r} contains a space: torch's inductor passes the venv's and the project's paths to the C++ "
            "compiler unquoted, so every compiled run would fail; clone or move the project to a path without spaces",
        )


def stage_config(overrides: list[str] | None = None, compiles: bool = False) -> Config:
    """Every stage command's prologue: log to stderr (credentials redacted: logs.configure), then validate
    params.yaml (and, for the stages that compile, the selected variants' inductor options); a bad params file is
    one clear error and exit 2, before any work."""
    logs.configure()
    from compilebench.config import guard  # here: `python -m compilebench.config.guard` runs it as a script

    guard.guard_stage()  # under DVC: params.yaml as this pipeline's; another pipeline's running here: exit 2
    try:
        config = at_home(load_config(overrides=overrides))
        if compiles:
            config.check_selected_variants()
            check_compile_paths(Path.cwd(), Path(sys.prefix))
    except ConfigError as error:
        logging.getLogger("compilebench").error("%s", error)
        sys.exit(2)
    return config
