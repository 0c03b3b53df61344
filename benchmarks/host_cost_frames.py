"""host_cost.py's host time by Python frame, from cProfile: ms per update by area (the plugin's folders, fairseq's,
torch's), each area's own Python and the C calls made from it, and the plugin's and fairseq's functions."""

import os
from collections import Counter

# Host time by Python frame, from cProfile: a function's own time goes to the area its file lies in; that of a C
# function (torch's operators, Python's builtins) and of Python outside the plugin, fairseq and torch (omegaconf, the
# standard library) to the area of the frames that called it, each call's share to its caller's.
PLUGIN_AREAS = ("models/", "criterions/", "tasks/", "tools/", "optim/")
FAIRSEQ_AREAS = ("trainer.py", "optim/", "logging/", "models/", "modules/", "criterions/", "tasks/", "utils.py")
AREAS = (
    *(f"plugin {area}" for area in (*PLUGIN_AREAS, "other")),
    *(f"fairseq {area}" for area in (*FAIRSEQ_AREAS, "other")),
    "torch",
    "other",
)


def area(path: str) -> str:
    """The area of AREAS a Python file lies in: the plugin's and fairseq's by folder (or file), then torch's."""
    path = path.replace(os.sep, "/")
    for package, who, areas in (("vaswani_plugin", "plugin", PLUGIN_AREAS), ("fairseq", "fairseq", FAIRSEQ_AREAS)):
        if f"/{package}/" in path:
            inside = path.rsplit(f"/{package}/", 1)[1]
            top = inside.split("/")[0] + ("/" if "/" in inside else "")
            return f"{who} {top if top in areas else 'other'}"
    return "torch" if "/torch/" in path else "other"


def frame_time(stats: dict, updates: int) -> tuple:
    """From pstats.Stats(...).stats: ms per update by (area, 'python' or 'C'), and by plugin or fairseq function
    ('vaswani_plugin/PATH:LINE NAME': (its own ms, with what it called))."""
    owners = {}

    def owner(function) -> dict:  # {area: share}: for whom a function's calls are made
        if function not in owners:
            where = "other" if function[0] == "~" else area(function[0])
            owners[function] = {where: 1.0}  # also a cycle's answer, while the callers are asked
            if where == "other" and function in stats:
                callers = stats[function][4]
                spent = charged(callers, 3) or charged(callers, 0)  # by time spent in calls from each, or by calls
                if spent:
                    owners[function] = {where: amount / sum(spent.values()) for where, amount in spent.items()}
        return owners[function]

    def charged(callers: dict, which: int) -> Counter:  # {area: edge[which] summed over the callers' owners}
        result = Counter()
        for caller, edge in callers.items():
            for where, share in owner(caller).items():
                result[where] += share * edge[which]
        return +result

    areas, functions = Counter(), {}
    for function, (_, _, own, cumulative, callers) in stats.items():
        path, line, name = function
        column = "C" if path == "~" else "python"
        where = "other" if path == "~" else area(path)
        for charged_area, seconds in (charged(callers, 2) if where == "other" and callers else {where: own}).items():
            areas[(charged_area, column)] += 1000 * seconds / updates
        if where.startswith(("plugin ", "fairseq ")):
            package = "vaswani_plugin" if where.startswith("plugin ") else "fairseq"
            name = f"{package}/{path.replace(os.sep, '/').rsplit(f'/{package}/', 1)[1]}:{line} {name}"
            functions[name] = (1000 * own / updates, 1000 * cumulative / updates)
    return areas, functions
