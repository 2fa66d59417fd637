"""MkDocs hook: the tables that restate the code are generated from it at build time.

A page asks for a table with a marker, replaced by the table when the site is built:

    <!-- generated: flags latency_proxy.cli:build_parser -->   every flag of that parser
    <!-- generated: flags loadgen.commands.cli:build_parser search=True -->   keyword arguments
    <!-- generated: metrics latency_proxy.telemetry.instruments:ALL -->   every instrument
    <!-- generated: presets loadgen.sim.model.presets:load -->   every bundled preset's figures
    <!-- generated: gpus loadgen.sim.model.catalogue:gpus -->   the GPU catalogue, ceilings too
    <!-- generated: keys loadgen.sim.model.presets:TYPES -->   a data file's keys and ranges
    <!-- fields: loadgen.analysis.records.Record -->   the page must name every field (checked)
    <!-- fields: latency_proxy.telemetry.access_log.TIMING_FIELDS -->   every key of a table

so a flag's default, a metric's name and a record's keys each have one source, the code.
A marker that cannot be honoured fails the build (`mkdocs build --strict` runs in CI).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parent.parent)

GENERATED = re.compile(r"<!-- generated: (\w+) ([\w.]+):(\w+)((?: \w+=\w+)*) -->")
FIELDS = re.compile(r"<!-- fields: ([\w.]+)\.(\w+) -->")
TRAILING_DEFAULT = re.compile(r"\s*\(default:? ([^()]*(?:\([^()]*\)[^()]*)*)\)$")


def on_config(config: Any) -> Any:
    """Import the code of this checkout (MkDocs restores sys.path after loading a hook)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for match in FIELDS.finditer(markdown):
        _check_fields(markdown, _load(match.group(1), match.group(2)), page.file.src_path)
    return GENERATED.sub(
        lambda m: _generate(m.group(1), _load(m.group(2), m.group(3)), _kwargs(m.group(4))),
        markdown,
    )


def _load(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def _kwargs(text: str) -> dict[str, Any]:
    pairs = (item.split("=", 1) for item in text.split())
    return {key: ast.literal_eval(value) for key, value in pairs}


def _generate(kind: str, source: Any, kwargs: dict[str, Any]) -> str:
    if kind == "flags":
        return flag_tables(_parser(source, kwargs))
    if kind == "metrics":
        return metric_table(source)
    if kind == "presets":
        return preset_table(source)
    if kind == "gpus":
        return gpu_table(source())
    if kind == "keys":
        return key_table(source)
    raise ValueError(f"docs/hooks.py: unknown table kind {kind!r}")


def _check_fields(markdown: str, source: Any, page: str) -> None:
    """A dataclass's fields, or the first items of a table of (key, …) rows."""
    if isinstance(source, type) and dataclasses.is_dataclass(source):
        names, what = [f.name for f in dataclasses.fields(source)], source.__name__
    else:
        names, what = [row[0] for row in source], "the table"
    missing = [name for name in names if f"`{name}`" not in markdown]
    if missing:
        raise ValueError(f"{page}: {what}'s fields {missing} are not documented")


def _parser(source: Any, kwargs: dict[str, Any]) -> argparse.ArgumentParser:
    """A parser from a function that builds one, or from one that adds to a given parser."""
    params = [p for p in inspect.signature(source).parameters.values() if p.default is p.empty]
    if not params:
        return source(**kwargs)
    parser = argparse.ArgumentParser(add_help=False)
    source(parser)
    return parser


def flag_tables(parser: argparse.ArgumentParser) -> str:
    """One table per argument group that has flags: flag, default, meaning."""
    out = []
    groups = [g for g in parser._action_groups if _documented(g._group_actions)]
    for group in groups:
        if len(groups) > 1 and group.title not in ("options", "optional arguments"):
            out.append(
                f"**{group.title}**" + (f": {group.description}" if group.description else "")
            )
            out.append("")
        out.append("| flag | default | meaning |")
        out.append("|---|---|---|")
        out.extend(_row(action, parser) for action in _documented(group._group_actions))
        out.append("")
    return "\n".join(out)


def _documented(actions: list[argparse.Action]) -> list[argparse.Action]:
    skip = (argparse._HelpAction, argparse._VersionAction)
    return [
        a
        for a in actions
        if a.option_strings and a.help != argparse.SUPPRESS and not isinstance(a, skip)
    ]


def _row(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    help_text = (action.help or "") % {**vars(action), "prog": parser.prog}
    default = ""
    found = TRAILING_DEFAULT.search(help_text)
    if found:
        default, help_text = found.group(1), help_text[: found.start()]
    elif action.default not in (None, argparse.SUPPRESS) and action.default != []:
        default = _shown(action)
    if action.choices and not isinstance(action.choices, range):
        help_text = (
            (help_text + "; " if help_text else "")
            + "one of "
            + ", ".join(f"`{c}`" for c in action.choices)
        )
    return f"| {_flag(action)} | {_cell(default)} | {_cell(help_text)} |"


def _flag(action: argparse.Action) -> str:
    names = [s for s in action.option_strings if not s.startswith("--no-")]
    if isinstance(action, argparse.BooleanOptionalAction):
        names = [n.replace("--", "--[no-]", 1) for n in names]
    metavar = ""
    if action.nargs != 0 and not isinstance(action, argparse.BooleanOptionalAction):
        shown = action.metavar or action.dest.upper()
        metavar = " " + (shown if isinstance(shown, str) else " ".join(shown))  # as argparse
        if action.choices and action.metavar is None:
            metavar = ""
    return ", ".join(f"`{n}{metavar}`" for n in names).replace("|", "\\|")


def _shown(action: argparse.Action) -> str:
    from latency_proxy.base.units import format_duration, format_size, parse_duration, parse_size

    value = action.default
    if isinstance(value, bool):
        return "on" if value else "off"
    if action.type is parse_duration and isinstance(value, int | float):
        return format_duration(value)
    if action.type is parse_size and isinstance(value, int):
        return format_size(value)
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def metric_table(specs: Any) -> str:
    """Every instrument: its Prometheus and OTel names, kind, unit, labels and meaning."""
    from latency_proxy.telemetry.instruments import PER_REQUEST

    common = {a.replace(".", "_") for a in PER_REQUEST}
    out = [
        "| Prometheus | OTel | kind | labels beyond the per-request ones | meaning |",
        "|---|---|---|---|---|",
    ]
    for spec in specs:
        name = spec.prometheus_name + ("_total" if spec.kind == "counter" else "")
        labels = [f"`{label}`" for label in spec.label_names if label not in common]
        if not common <= set(spec.label_names):
            labels = ["only " + ", ".join(labels)]
        kind = {"updown": "gauge"}.get(spec.kind, spec.kind)
        unit = {"s": "seconds", "{token}": "tokens"}.get(spec.unit, spec.unit)
        if unit:
            kind += f", {unit}"
        if spec.bounds:
            kind += f", {len(spec.bounds)} buckets {_bound(spec.bounds[0], spec.unit)}–"
            kind += _bound(spec.bounds[-1], spec.unit)
        out.append(
            f"| `{name}` | `{spec.name}` | {kind} | {', '.join(labels)} | "
            f"{_cell(spec.description)} |"
        )
    return "\n".join(out) + "\n"


def _bound(value: float, unit: str) -> str:
    if unit != "s":
        return f"{value:g}"
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"


def preset_table(load: Any) -> str:
    """Each bundled preset's sizes and step times, from the performance model itself."""
    from loadgen.sim.model.presets import names

    ctx, prompt = 1024, 2048
    out = [
        "| preset | serves | weights/GPU | KV cache | `max_num_seqs` | TPOT batch 1 "
        f"({ctx // 1024}k ctx) | step at batch 64 ({ctx // 1024}k ctx each) | "
        f"prefill {prompt:,} tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in names():
        preset = load(name)
        perf, spec = preset.perf, preset.perf.model
        attention = "MHA" if spec.kv_heads == spec.heads else "GQA"
        decode = perf.step_time(1, ctx + 1, ctx + 1).total
        batch = 64
        batched = perf.step_time(batch, batch * (ctx + 1), batch * (ctx + 1), batch).total
        prefill = perf.step_time(prompt, prompt, prompt * (prompt + 1) // 2).total
        mark = " (not calibrated)" if preset.uncalibrated else ""
        out.append(
            f"| `{name}`{mark} | {preset.served_model_name} | "
            f"{perf.weight_bytes_per_gpu / 1e9:.1f} GB | "
            f"{preset.kv_capacity_tokens / 1000:,.0f}k tokens ({attention}) | "
            f"{preset.engine.max_num_seqs:,} | {decode * 1e3:.1f} ms | {batched * 1e3:.1f} ms | "
            f"{prefill * 1e3:,.0f} ms |"
        )
    return "\n".join(out) + "\n"


def gpu_table(gpus: list[Any]) -> str:
    """The GPU catalogue: each GPU's datasheet figures and the ceilings a preset or a fit
    may claim of it, with where each comes from."""
    out = [
        "| `--gpu` (aliases) | GPU | memory | bandwidth | dense TFLOP/s | interconnect | "
        "MBU ceiling | MFU ceiling | datasheet; ceiling from |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for gpu in gpus:
        aliases = f" ({', '.join(f'`{a}`' for a in gpu.aliases)})" if gpu.aliases else ""
        rates = ", ".join(f"{name} {rate / 1e12:,.0f}" for name, rate in gpu.flops.items())
        out.append(
            f"| `{gpu.id}`{aliases} | {gpu.name} | {gpu.memory / 2**30:,.0f} GiB | "
            f"{gpu.memory_bandwidth / 1e12:.2f} TB/s | {rates} | {gpu.interconnect} | "
            f"{gpu.mbu_ceiling:.3g} | {gpu.mfu_ceiling:.3g} | {gpu.source}; "
            f"{gpu.ceiling_source} |"
        )
    return "\n".join(out) + "\n"


def key_table(types: dict[str, dict[str, Any]]) -> str:
    """A preset file's keys by table, each with its type and range, and whether it may be
    left out (presets.optional: the model's own default then holds)."""
    from loadgen.sim.model.presets import optional

    out = ["| table | key | takes | may be left out |", "|---|---|---|---|"]
    for table, keys in types.items():
        left_out = optional(table)
        for key, kind in keys.items():
            where = f"`[{table}]`" if table else "(top level)"
            out.append(
                f"| {where} | `{key}` | {_takes(kind)} | {'yes' if key in left_out else ''} |"
            )
    return "\n".join(out) + "\n"


def _takes(kind: Any) -> str:
    """A setting type's values in words (latency_proxy/base/setting_types.py, sim/model/keys.py)."""
    name = type(kind).__name__
    if name == "Number":
        low = "above 0" if not kind.zero_ok and kind.low == 0 else _figure(kind.low)
        whole = "whole, " if kind.whole else ""
        return f"{kind.hint} ({whole}{low} to {_figure(kind.high)})"
    if name == "Text":
        return "one of " + ", ".join(f"`{c}`" for c in kind.choices) if kind.choices else "text"
    if name == "OneOf":
        return f"one of {kind.limits}"
    if name == "Flag":
        return "true or false"
    return f"{name.lower()} ({kind.limits})"


def _figure(x: float) -> str:
    """1,000,000 as written, larger figures as 2.15e9."""
    return f"{x:,g}" if abs(x) <= 1e6 else f"{x:.3g}".replace("e+0", "e").replace("e+", "e")
