"""The queries of the provisioned Grafana dashboards, as Grafana would send them.

The static checks (every query parses) and the live test (every Prometheus panel returns data)
both read the dashboards through here, so they see the same queries with the same variable
values: a textbox's default, and a multi-value query variable's "All" (its allValue).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import yaml

from tests.support import ROOT

DASHBOARDS = ROOT / "grafana" / "dashboards"
DATASOURCES = ROOT / "grafana" / "provisioning" / "datasources" / "datasources.yaml"

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?(\w+)\)$", re.S)


@dataclass(frozen=True, slots=True)
class Query:
    dashboard: str
    panel: str
    ref_id: str
    datasource_type: str
    datasource_uid: str
    text: str  # as stored, with $variables
    instant: bool = False
    exemplar: bool = False

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel!r} / {self.ref_id}"


def dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def datasources() -> list[dict]:
    return yaml.safe_load(DATASOURCES.read_text())["datasources"]


def panels(dashboard: Mapping) -> Iterator[dict]:
    """Every panel, those inside collapsed rows included; rows themselves are not panels."""
    for panel in dashboard.get("panels", []):
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def queries(name: str, dashboard: Mapping) -> Iterator[Query]:
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            source = target.get("datasource") or panel["datasource"]
            text = target.get("expr") if "expr" in target else target.get("query")
            yield Query(
                name,
                panel["title"],
                target["refId"],
                source["type"],
                source["uid"],
                text,
                instant=bool(target.get("instant")),
                exemplar=bool(target.get("exemplar")),
            )


def variable_queries(name: str, dashboard: Mapping) -> Iterator[tuple[str, str, str]]:
    """(variable, metric selector, label) of each `label_values(selector, label)` variable."""
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            text = variable["query"]
            text = text["query"] if isinstance(text, dict) else text
            match = _LABEL_VALUES.match(text.strip())
            if match is None:
                raise ValueError(f"{name}: variable {variable['name']}: not label_values: {text}")
            yield variable["name"], match.group(1), match.group(2)


def defaults(dashboard: Mapping) -> dict[str, str]:
    """Each variable's value when the dashboard opens: "All" is the allValue regex."""
    values = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "textbox":
            values[variable["name"]] = variable["query"]
        elif variable.get("includeAll"):
            values[variable["name"]] = variable["allValue"]
        else:
            raise ValueError(f"variable {variable['name']}: no default this helper knows")
    return values


def expand(text: str, values: Mapping[str, str], rate_interval: str) -> str:
    """Grafana's interpolation of `$var`, `${var}`, `[[var]]` and `$__rate_interval`."""
    builtins = {"__rate_interval": rate_interval, "__interval": rate_interval}

    def value(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        if name in builtins:
            return builtins[name]
        if name not in values:
            raise KeyError(f"undefined variable ${name} in: {text}")
        return values[name]

    return _VARIABLE.sub(value, text)


def variables_used(text: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in _VARIABLE.finditer(text)}
