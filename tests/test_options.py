"""The options table: parsing, one spelling of true/false, one-line refusals, the generated docs page."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nova import options
from nova.options import BY_VARIABLE, DEFAULTS, TABLE, OptionError, Options, parse

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_and_the_dataclass_name_the_same_options_with_the_same_defaults():
    assert tuple(o.field for o in TABLE) == options.field_names()
    assert parse({}) == DEFAULTS == Options()
    assert all(getattr(DEFAULTS, o.field) == o.default for o in TABLE)
    assert len({o.variable for o in TABLE}) == len(TABLE) and all(o.variable.startswith("NOVA_") for o in TABLE)


@pytest.mark.parametrize("text,value", [("1", True), ("true", True), ("YES", True), (" on ", True),
                                        ("0", False), ("False", False), ("no", False), ("OFF", False)])
def test_every_bool_option_takes_every_spelling(text, value):
    for o in TABLE:
        if o.kind is options.BOOL:
            assert getattr(parse({o.variable: text}), o.field) is value


def test_blank_is_the_default():
    for o in TABLE:
        assert getattr(parse({o.variable: "  "}), o.field) == o.default


def test_typed_values():
    got = parse({"NOVA_CACHE_DIR": "~/kernels", "NOVA_TARGET": "h100", "NOVA_STREAM_K": "auto",
                 "NOVA_PINGPONG": "128x192", "NOVA_CLUSTER": "2X1", "NOVA_TMA_L2_PROMOTION": "2",
                 "NOVA_ATTENTION_HOPPER": "0", "NOVA_ATTENTION_TILE_ORDER": "Query"})
    assert got.cache_dir == Path("~/kernels").expanduser() and got.target == "h100"
    assert got.stream_k is None and got.pingpong == (128, 192) and got.cluster == (2, 1)
    assert got.tma_l2_promotion == 2 and got.attention_hopper == "off" and got.attention_tile_order == "query"
    assert parse({"NOVA_PINGPONG": "on", "NOVA_STREAM_K": "no"}).pingpong is True
    assert parse({"NOVA_STREAM_K": "no"}).stream_k is False


@pytest.mark.parametrize("variable,text", [
    ("NOVA_WIDE_CONSUMERS", "2"), ("NOVA_HOPPER", "banana"), ("NOVA_PLAN_CACHE", "banana"),
    ("NOVA_DETERMINISTIC", "maybe"), ("NOVA_OFFLINE", "offline"), ("NOVA_DEBUG", "verbose"),
    ("NOVA_STREAM_K", "2"), ("NOVA_PINGPONG", "128"), ("NOVA_PINGPONG", "0x192"), ("NOVA_CLUSTER", "two"),
    ("NOVA_CLUSTER", "2x0"), ("NOVA_TMA_L2_PROMOTION", "256"), ("NOVA_TMA_L2_PROMOTION", "-1"),
    ("NOVA_ATTENTION", "cudnn"), ("NOVA_ATTENTION_PRECISION", "fast"), ("NOVA_ATTENTION_HOPPER", "sometimes"),
    ("NOVA_ATTENTION_HOPPER_BWD", "maybe"), ("NOVA_ATTENTION_PERSISTENT", "2"),
    ("NOVA_ATTENTION_TILE_ORDER", "random"),
])
def test_a_bad_value_is_one_line_naming_the_variable_and_the_allowed_values(variable, text):
    with pytest.raises(OptionError) as e:
        parse({variable: text})
    message = str(e.value)
    assert message.startswith(f"{variable}={text!r}: expected ") and "\n" not in message
    assert BY_VARIABLE[variable].kind.allowed in message


def test_current_follows_the_environment(monkeypatch):
    monkeypatch.setenv("NOVA_HOPPER", "off")
    assert options.current().hopper is False
    monkeypatch.setenv("NOVA_HOPPER", "on")
    assert options.current().hopper is True
    monkeypatch.setenv("NOVA_HOPPER", "banana")
    with pytest.raises(OptionError, match="NOVA_HOPPER='banana'"):
        options.current()


def test_debug_alone_survives_another_bad_option(monkeypatch):
    monkeypatch.setenv("NOVA_HOPPER", "banana")
    monkeypatch.setenv("NOVA_DEBUG", "1")
    assert options.debug() is True
    monkeypatch.setenv("NOVA_DEBUG", "0")
    assert options.debug() is False


def test_configure_takes_its_options_as_an_argument(monkeypatch):
    """A derivation is a function of its arguments: options passed in win over the environment."""
    from nova.configurator import GemmProblem, configure
    p = GemmProblem(4096, 4096, 4096, "bf16")
    monkeypatch.setenv("NOVA_HOPPER", "0")
    assert configure(p, "h200").schedule.hopper is None                       # the environment's
    assert configure(p, "h200", options=DEFAULTS).schedule.hopper is not None  # the argument's
    monkeypatch.delenv("NOVA_HOPPER")
    assert configure(p, "h200", options=DEFAULTS.replace(hopper=False)).schedule.hopper is None


def test_the_cli_refuses_a_bad_option_with_one_line(monkeypatch, capsys):
    from nova.cli.config import main
    monkeypatch.setenv("NOVA_HOPPER", "banana")
    assert main(["explain", "matmul", "256x256x256", "--target", "h200"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "NOVA_HOPPER='banana': expected 1/0, true/false, yes/no, on/off" in err


def test_nova_reads_its_variables_only_through_the_table():
    """No module of nova/ but options.py reads a NOVA_ variable from the environment."""
    offenders = []
    for path in sorted((ROOT / "nova").rglob("*.py")):
        if path.name == "options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("get", "getenv") and node.args and isinstance(node.args[0], ast.Constant) and \
                    str(node.args[0].value).startswith("NOVA_"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
                    str(node.slice.value).startswith("NOVA_") and "environ" in ast.unparse(node.value):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders
    assert "_data" not in (ROOT / "nova/runtime/matmul.py").read_text()


def test_the_committed_configuration_page_is_the_generated_one():
    assert (ROOT / "docs/configuration.md").read_text() == options.docs_page(), \
        "regenerate: python3 -m nova.options > docs/configuration.md"
