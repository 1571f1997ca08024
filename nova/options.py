"""Nova's options: the one table of the ``NOVA_*`` environment variables.

Each row names its variable, its type, its default, the values it accepts, what it does, and whether
it changes generated code.  ``current()`` parses the environment against the table into a frozen
``Options`` (a bad value raises ``OptionError``: one line naming the variable and what it accepts);
entry points (``configure``, ``configure_attention``, ``nova.matmul``, ``nova.attention``,
``nova.compile``, the CLI) read it once and pass it down, so a derivation is a function of its
arguments.  ``options.docs_page()`` renders the configuration reference (docs/configuration.md).

One spelling of true and false everywhere: 1/0, true/false, yes/no, on/off (any case).  An unset or
empty variable takes the default.  An option that changes generated code changes the problem or the
schedule a kernel is built from, both of which the kernel cache key hashes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
BOOL_SPELLINGS = "1/0, true/false, yes/no, on/off"


class OptionError(ValueError):
    """An environment variable of the options table holds a value it does not accept."""


# --------------------------------------------------------------------------- value types
@dataclass(frozen=True)
class Kind:
    """How one option's text becomes its value: ``name`` (the type column), ``allowed`` (the text of
    the accepted values, also the error's), ``parse`` (stripped, non-empty text -> value or None when
    refused)."""
    name: str
    allowed: str
    parse: Callable[[str], object]
    show: Callable[[object], str] | None = None     # how a default is written (None: str)


def _bool(text: str):
    low = text.lower()
    return True if low in TRUE else False if low in FALSE else None


def _auto_bool(text: str):
    """True (force), False (never), "auto" (the model decides; returned as None by the option)."""
    return "auto" if text.lower() == "auto" else _bool(text)


def _shape(text: str):
    rows, sep, cols = text.lower().partition("x")
    if sep and rows.isdigit() and cols.isdigit() and int(rows) >= 1 and int(cols) >= 1:
        return int(rows), int(cols)
    return None


NOTHING = object()          # a kind's parse result for a text that means None (besides "auto")
MEMORY_LEAN = 0.005         # NOVA_MEMORY_POLICY=lean: memory savings may cost 0.5 % of the predicted step
MEMORY_MOST = 0.1           # the largest fraction NOVA_MEMORY_POLICY accepts


def _memory_policy(text: str):
    """``lean`` -> ``MEMORY_LEAN``, ``fast`` -> None (no saving), a number in [0, ``MEMORY_MOST``] -> itself."""
    low = text.lower()
    if low in ("lean", "fast"):
        return MEMORY_LEAN if low == "lean" else NOTHING
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value <= MEMORY_MOST else None


def enum(*values: str, aliases: dict | None = None) -> Kind:
    """One of ``values`` (any case); ``aliases`` maps other spellings to one of them."""
    table = {v: v for v in values} | dict(aliases or {})
    shown = ", ".join(values) + (f" ({', '.join(f'{a}={v}' for a, v in (aliases or {}).items())})" if aliases else "")
    return Kind("enum", shown, lambda text: table.get(text.lower()))


BOOL = Kind("bool", BOOL_SPELLINGS, _bool)
AUTO_BOOL = Kind("bool or auto", f"auto, or {BOOL_SPELLINGS}", _auto_bool)
PATH = Kind("path", "a directory path (~ expanded)", lambda text: Path(text).expanduser())
NAME = Kind("name", "a GPU preset (`nova-config targets`)", lambda text: text)
SHAPE = Kind("shape", "MxN, two integers >= 1 (e.g. 2x1)", _shape)
PINGPONG = Kind("bool, auto or shape", f"auto, {BOOL_SPELLINGS}, or a warpgroup tile ROWSxN (e.g. 128x192)",
                lambda text: _auto_bool(text) if _auto_bool(text) is not None else _shape(text))
MEMORY_POLICY = Kind("lean, fast or fraction", f"lean ({MEMORY_LEAN}), fast (no saving), or a fraction of the step "
                     f"between 0 and {MEMORY_MOST} (e.g. 0.01)", _memory_policy,
                     lambda value: "lean" if value == MEMORY_LEAN else f"{value:g}")
L2_PROMOTION = Kind("int", "0 (none), 1 (64 B), 2 (128 B), 3 (256 B)", lambda text: int(text) if text in "0123" and
                    len(text) == 1 else None)


@dataclass(frozen=True)
class Option:
    """One row of the table: ``field`` is its name in ``Options``, ``variable`` its environment variable."""
    field: str
    variable: str
    kind: Kind
    default: object
    doc: str
    changes_code: bool

    def parse(self, raw: str | None):
        """The value of ``raw`` (the variable's text; None or blank: the default), or OptionError."""
        text = (raw or "").strip()
        if not text:
            return self.default
        value = self.kind.parse(text)
        if value is None:
            raise OptionError(f"{self.variable}={text!r}: expected {self.kind.allowed}")
        return None if value == "auto" or value is NOTHING else value

    def default_text(self) -> str:
        if self.default is None:
            return "auto" if self.kind in (AUTO_BOOL, PINGPONG) else "unset"
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        return self.kind.show(self.default) if self.kind.show else str(self.default)


TABLE: tuple[Option, ...] = (
    # where kernels come from
    Option("cache_dir", "NOVA_CACHE_DIR", PATH, None,
           "the kernel and plan cache directory; unset: `$XDG_CACHE_HOME/nova`, else `~/.cache/nova`", False),
    Option("offline", "NOVA_OFFLINE", BOOL, False,
           "cache only: a kernel missing from the cache raises `NotPrecompiledError` instead of compiling "
           "(machines without MLIR; fill the cache with `nova precompile`)", False),
    Option("plan_cache", "NOVA_PLAN_CACHE", BOOL, True,
           "keep `nova.compile`'s planned graphs on disk under `<cache dir>/plans`", False),
    Option("target", "NOVA_TARGET", NAME, None,
           "the GPU preset kernels are configured for; unset: the preset matching the GPU's name, else "
           "the GPU's queried properties", True),
    Option("debug", "NOVA_DEBUG", BOOL, False,
           "show the traceback of an error (the CLI prints one line otherwise); a failing kernel stops "
           "`nova precompile`", False),
    Option("deterministic", "NOVA_DETERMINISTIC", BOOL, False,
           "GEMMs that do not say otherwise give the same bits on every run (split-K adds its slices "
           "in a fixed order instead of with atomics); Nova's other kernels add in a fixed order always, "
           "so a compiled step on Nova's kernels is then the same bits run to run", True),
    # GEMM schedule choices (experiments and A/B runs; the derivation decides when unset)
    Option("hopper", "NOVA_HOPPER", BOOL, True,
           "use the wgmma/TMA GEMM kernels on targets that have them; 0: the mma.sync kernels", True),
    Option("wide_consumers", "NOVA_WIDE_CONSUMERS", BOOL, True,
           "let the Hopper GEMM derivation try three consumer warpgroups; 0: one or two", True),
    Option("stream_k", "NOVA_STREAM_K", AUTO_BOOL, None,
           "1 forces stream-K GEMM schedules (an error where no tile allows it, and where the mma.sync kernels "
           "run: a target without wgmma, or `NOVA_HOPPER=0`), 0 rules them out", True),
    Option("pingpong", "NOVA_PINGPONG", PINGPONG, None,
           "1 forces ping-pong consumers, ROWSxN forces them on that warpgroup tile (an error where they cannot "
           "run, and where the mma.sync kernels run: a target without wgmma, or `NOVA_HOPPER=0`), 0 rules them out",
           True),
    Option("cluster", "NOVA_CLUSTER", SHAPE, None,
           "force a thread-block cluster shape (CTAs along M x along N) wherever it can run", True),
    Option("tma_l2_promotion", "NOVA_TMA_L2_PROMOTION", L2_PROMOTION, None,
           "the L2 promotion of every TMA tensor map; unset: 256 B where base and strides are 128-byte "
           "multiples, else 128 B", False),
    # attention
    Option("attention", "NOVA_ATTENTION", enum("nova", "aten"), "nova",
           "who runs a compiled program's attention: Nova's fused kernels, or ATen", False),
    Option("attention_precision", "NOVA_ATTENTION_PRECISION", enum("tf32", "3xtf32", "fp32"), "tf32",
           "how float32 attention multiplies: one TF32 product each (tf32), the scores as three TF32 products "
           "(3xtf32: FP32-accurate scores), or every product as three (fp32: as accurate as PyTorch's float32 "
           "attention); on the H200 the split kernels take 2.4x (3xtf32) and 3.9x (fp32) TF32's attention time",
           True),
    Option("attention_hopper", "NOVA_ATTENTION_HOPPER",
           enum("auto", "off", "force", aliases={"0": "off", "false": "off", "no": "off", "1": "auto"}), "auto",
           "the Hopper attention kernels: where the model predicts them faster (auto), nowhere (off), or "
           "wherever they can run (force)", True),
    Option("attention_hopper_backward", "NOVA_ATTENTION_HOPPER_BWD", BOOL, True,
           "let the attention derivation weigh the Hopper dK/dV and dQ kernels; 0: the backward stays "
           "on mma.sync", True),
    Option("attention_split_kv", "NOVA_ATTENTION_SPLIT_KV", BOOL, True,
           "let the attention derivation split a grid that leaves SMs idle along its streamed loop (the "
           "forward's and dQ's keys, dK/dV's query tiles), with a combine kernel; 0: never split", True),
    Option("attention_persistent", "NOVA_ATTENTION_PERSISTENT", BOOL, True,
           "make the Hopper attention forward persistent where it has more work tiles than SMs", True),
    Option("attention_tile_order", "NOVA_ATTENTION_TILE_ORDER", enum("head", "query"), "head",
           "the persistent attention forward's work order: a head's query tiles together, or query "
           "tiles across heads", True),
    # memory-bound groups of a compiled program
    Option("pointwise", "NOVA_POINTWISE",
           enum("all", "none", "fused", "optimizer",
                aliases={"1": "all", "0": "none", "true": "all", "false": "none", "yes": "all", "no": "none",
                         "on": "all", "off": "none"}), "all",
           "which memory-bound groups a compiled program runs on Nova kernels (A/B runs against ATen): fused "
           "pointwise groups and optimizer updates (all), neither (none: ATen's kernels and foreach "
           "optimizer), only the pointwise groups (fused) or only the optimizer updates (optimizer, one "
           "multi-tensor launch per group); part of the plan cache's key", False),
    # memory
    Option("memory_policy", "NOVA_MEMORY_POLICY", MEMORY_POLICY, MEMORY_LEAN,
           "without a memory budget, the memory savings a training step's plan takes (chunked loss, "
           "rematerialization): those whose plan the step-time model predicts at most this fraction of the "
           "step slower than the fastest plan, together (`lean`: 0.5 %, below what a benchmark resolves); "
           "`fast`: none, the fastest plan (docs/memory.md); part of the plan cache's key", False),
    Option("host_offload", "NOVA_HOST_OFFLOAD", BOOL, True,
           "saved activations may be copied to page-locked host memory and back on the copy engines where the "
           "step-time model predicts the copies hidden behind the kernels: under a memory budget, and by the "
           "default memory policy within its allowance (docs/memory.md#host-offload); 0: never; part of the "
           "plan cache's key", False),
)
BY_VARIABLE = {o.variable: o for o in TABLE}


@dataclass(frozen=True)
class Options:
    """Every option's value (the table's defaults unless the environment says otherwise)."""
    cache_dir: Path | None = None
    offline: bool = False
    plan_cache: bool = True
    target: str | None = None
    debug: bool = False
    deterministic: bool = False
    hopper: bool = True
    wide_consumers: bool = True
    stream_k: bool | None = None
    pingpong: bool | tuple[int, int] | None = None
    cluster: tuple[int, int] | None = None
    tma_l2_promotion: int | None = None
    attention: str = "nova"
    attention_precision: str = "tf32"
    attention_hopper: str = "auto"
    attention_hopper_backward: bool = True
    attention_split_kv: bool = True
    attention_persistent: bool = True
    attention_tile_order: str = "head"
    pointwise: str = "all"
    memory_policy: float | None = MEMORY_LEAN
    host_offload: bool = True

    def replace(self, **changes) -> "Options":
        return replace(self, **changes)


DEFAULTS = Options()


def parse(environ) -> Options:
    """``Options`` from a mapping of variable -> text (``os.environ`` or a dict); OptionError on a bad value."""
    return Options(**{o.field: o.parse(environ.get(o.variable)) for o in TABLE})


_parsed: dict[tuple, Options] = {}
# The environment as CPython's ``os.environ`` stores it (encoded keys and values, kept in step with every
# assignment and deletion through ``os.environ``, hence with monkeypatch.setenv and mock.patch.dict): one
# dict lookup per variable instead of an encode, a lookup and a decode (~25 us -> ~2 us per ``current()``
# on a slow host; ``nova.attention`` reads the options on every call).  Other interpreters: os.environ.
_ENVIRON_DATA = getattr(os.environ, "_data", None)
_ENCODED = (tuple(os.environ.encodekey(o.variable) for o in TABLE)
            if _ENVIRON_DATA is not None and hasattr(os.environ, "encodekey") else None)


def current() -> Options:
    """The options of the process environment as it is now (parsed once per distinct set of values)."""
    if _ENCODED is not None:
        get = _ENVIRON_DATA.get
        raw = tuple(get(k) for k in _ENCODED)
    else:
        raw = tuple(os.environ.get(o.variable) for o in TABLE)
    options = _parsed.get(raw)
    if options is None:
        options = _parsed[raw] = parse({o.variable: os.environ.get(o.variable) for o in TABLE})
    return options


def debug() -> bool:
    """``NOVA_DEBUG`` alone (an error handler must not fail on another option's bad value)."""
    try:
        return BY_VARIABLE["NOVA_DEBUG"].parse(os.environ.get("NOVA_DEBUG"))
    except OptionError:
        return False


# --------------------------------------------------------------------------- the reference page
def markdown_table() -> str:
    """The table as markdown: variable, type, default, accepted values, whether it changes generated
    code, what it does."""
    rows = ["| variable | type | default | accepts | changes code | what it does |", "|---|---|---|---|---|---|"]
    for o in TABLE:
        rows.append(f"| `{o.variable}` | {o.kind.name} | `{o.default_text()}` | {o.kind.allowed} | "
                    f"{'yes' if o.changes_code else 'no'} | {o.doc} |")
    return "\n".join(rows) + "\n"


def docs_page() -> str:
    """docs/configuration.md, generated (``python3 -m nova.options > docs/configuration.md``)."""
    return ("# Configuration\n\n"
            "<!-- generated by `python3 -m nova.options > docs/configuration.md`; edit nova/options.py -->\n\n"
            "Nova reads these environment variables.  An unset or empty variable takes its default.  "
            f"Every yes/no option accepts {BOOL_SPELLINGS} (any case); any other value stops Nova with one "
            "line naming the variable and the values it accepts.\n\n"
            "Options that change code change the problem or the schedule a kernel is built from; the kernel "
            "cache key hashes both, so a kernel built under one setting is never reused under another.  "
            "The GEMM and attention schedule options are for experiments and A/B runs: unset, the "
            "derivation decides.\n\n"
            + markdown_table() +
            "\nIn Python, `nova.options.current()` returns these values as a frozen `Options`; "
            "`nova.configurator.configure(problem, target, options=...)` and "
            "`configure_attention(..., options=...)` take one explicitly.  `nova.matmul` reads the options "
            "the first time it sees a call signature (dtypes, shapes, strides, devices); after changing "
            "`NOVA_TARGET` or `NOVA_DETERMINISTIC` inside a running process, call "
            "`nova.runtime.matmul.reset()`.\n")


def field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(Options))


if __name__ == "__main__":
    print(docs_page(), end="")
