"""Multi-turn tool use: the tool config a job names, the classes it names, the agent loop that calls them.

Layer 3 of :mod:`rayjobs.preflight.checks`, beside :mod:`rayjobs.preflight.clusterfiles`. verl 0.9.1
loads tools only inside its ``AgentLoopWorker`` actors, once the cluster and the models are up, and
fails there with cryptic errors (a module that is not there: ``'NoneType' object has no attribute
'loader'``); a tool config without the tool agent is no error to verl at all: it trains single-turn
and never calls a tool (verl#4441). All of it is checked here from the files alone: the YAML is
read, modules are located on disk and parsed (AST); nothing of the job's code or of verl is imported.

Where verl looks (``resolve_config_path``, ``tool_registry.get_tool_class``): a relative
``tool_config_path`` against the worker's cwd -- the unpacked working_dir -- and only inside it;
``class_name`` ``pkg.module.Class`` through ``sys.path``, on which Ray puts the working_dir first.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from rayjobs.preflight.clusterfiles import _column_values
from rayjobs.preflight.keys import as_list, get_key, path_kind
from rayjobs.preflight.problem import Problem, note
from rayjobs.preflight.verlfacts import _verl_root, verl_facts
from rayjobs.config.configcache import plain

R = "actor_rollout_ref.rollout"
TOOL_KEY = f"{R}.multi_turn.tool_config_path"
FUNC_KEY = f"{R}.multi_turn.function_tool_path"
AGENT_KEY = f"{R}.agent.default_agent_loop"
#: The tool rayjobs ships (scripts/multiturn/, the working_dir of +exp=gsm8k_multiturn_tools).
SHIPPED_TOOL = "multiturn.gsm8k_tool.Gsm8kTool"
#: verl.tools in 0.9.1: everything else there (gsm8k, geo3k, search, sandbox, image tools) is gone (#6302).
VERL_TOOL_MODULES = ("verl.tools.base_tool", "verl.tools.function_tool", "verl.tools.schemas", "verl.tools.tool_registry")


def tool_problems(cfg: Any, working_dir: str, files_visible: bool = True) -> list[Problem]:
    """Every problem of a config's tool use (none when it configures no tools).

    Args:
        cfg: the composed (or resolved plain) config.
        working_dir: the directory the job ships (its cwd on every node); ``://`` for a rerun's snapshot.
        files_visible: the cluster's storage is visible from here (the embedded cluster).
    """
    cfg = plain(cfg)
    tool_path, fn_path = get_key(cfg, TOOL_KEY), get_key(cfg, FUNC_KEY)
    if not tool_path and not fn_path:
        return []
    data = _visible_data(cfg) if files_visible else []
    out = _agent_problems(cfg, data)
    if "://" in working_dir:
        return out  # a rerun runs the old job's code snapshot on the cluster: not visible here
    names: Sequence[str] = ()
    if tool_path:
        probs, names = _tool_config_cached(str(tool_path), working_dir, files_visible, _stamp(str(tool_path), working_dir))
        out += probs
    if fn_path:
        out += _function_tool_problems(str(fn_path), working_dir, files_visible)
    if names and not out:
        out += _tools_kwargs_problems(cfg, data, names)
    return out


def _visible_data(cfg: Any) -> list[tuple[str, str]]:
    """(key, file) of the data files present here."""
    return [(key, f) for key in ("data.train_files", "data.val_files") for f in as_list(get_key(cfg, key))
            if path_kind(f) == "absolute" and os.path.isfile(f)]


# --------------------------------------------------------------------------- agent loop and rollout
def _agent_problems(cfg: Any, data: list[tuple[str, str]]) -> list[Problem]:
    """The agent loop that calls the tools, the rollout mode it needs, the tool-call parser."""
    facts, out = verl_facts(), []
    loop = get_key(cfg, AGENT_KEY, "single_turn_agent")
    # A custom agent loop (agent_loop_config_path) may use the tools its own way; rows may pick the loop.
    if loop != "tool_agent" and not get_key(cfg, f"{R}.agent.agent_loop_config_path") and not _rows_pick_tool_agent(data):
        what = (f"{loop!r} never calls a tool: verl would train single-turn, silently (verl#4441)"
                if loop in facts["agent_loops"] else
                f"{loop!r} is not an agent loop of verl {facts['version']} ({', '.join(facts['agent_loops'])}); "
                f"the first rollout would fail on the GPUs")
        which = "multi_turn.tool_config_path" if get_key(cfg, TOOL_KEY) else "multi_turn.function_tool_path"
        out.append(Problem(AGENT_KEY, loop, f"tools are configured ({which}) but the default agent loop {what}",
                           f"set {AGENT_KEY}=tool_agent (or give every data row agent_name=tool_agent)"))
    mode = get_key(cfg, f"{R}.mode", "async")
    if mode not in ("async", "sync"):  # sync: rules._rollout says it was removed
        out.append(Problem(f"{R}.mode", mode, "tools run in verl's agent loop, which is async rollout only (any other "
                                              f"mode is deprecated in verl {facts['version']})",
                           f"set {R}.mode=async or remove the override"))
    fmt = get_key(cfg, f"{R}.multi_turn.format", "hermes")
    if fmt not in facts["tool_parsers"]:
        out.append(Problem(f"{R}.multi_turn.format", fmt, f"is not a tool-call parser of verl {facts['version']} "
                                                          f"(ValueError: Unknown tool parser, in every agent loop worker)",
                           f"use one of {', '.join(facts['tool_parsers'])} (Qwen2.5: hermes)"))
    return out


def _rows_pick_tool_agent(data: list[tuple[str, str]]) -> bool:
    """Every (visible) data file has an ``agent_name`` column that is ``tool_agent`` in every row."""
    return bool(data) and all(_column_values(f, "agent_name") == ["tool_agent"] for _, f in data)


# --------------------------------------------------------------------------- files
def resolve(key: str, path: str, working_dir: str, files_visible: bool) -> tuple[Optional[Path], Optional[Problem]]:
    """Where verl would find ``path`` on the cluster, mirrored here: (file to read or None, problem or None)."""
    if os.path.isabs(path):
        if not files_visible:
            note(f"{key}={path!r} is absolute: it must exist at that path on every node (not visible from here)")
            return None, None
        if not os.path.isfile(path):
            return None, Problem(key, path, "no such file on the cluster (an absolute path must exist on every node)",
                                 "put the file in the job's working_dir and give its path relative to it")
        return Path(path), None
    wd = os.path.abspath(working_dir)
    full = os.path.normpath(os.path.join(wd, path))
    if not full.startswith(wd + os.sep):
        return None, Problem(key, path, f"leaves the job's working_dir ({wd}); verl resolves a relative path only inside "
                                        f"the worker's cwd, the unpacked working_dir", "move the file into the working_dir")
    if os.path.isfile(full):
        return Path(full), None
    root = _verl_root()  # verl's own fallbacks: its project root (site-packages for a wheel), its package dir
    for base in (root.parent, root) if root else ():
        cand = Path(os.path.normpath(base / path))
        if cand.is_relative_to(base) and cand.is_file():
            return cand, None
    return None, Problem(key, path, f"no such file in the job's working_dir ({full}); verl's AgentLoopWorker would fail "
                                    f"with FileNotFoundError after the GPUs are allocated",
                         f"fix the path (relative to rayjobs.working_dir={wd})")


def _stamp(path: str, working_dir: str) -> Optional[tuple[int, int]]:
    """(mtime, size) of the tool config as named, so a cached verdict is dropped when the file changes."""
    try:
        st = os.stat(path if os.path.isabs(path) else os.path.join(working_dir, path))
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=64)
def _tool_config_cached(path: str, working_dir: str, files_visible: bool,
                        _stamp: Optional[tuple[int, int]]) -> tuple[tuple[Problem, ...], tuple[str, ...]]:
    """:func:`_tool_config_problems`, once per file version: a sweep's points share one tool config, and
    OmegaConf's load costs ~15 ms (the modules it names are read once per process)."""
    probs, names = _tool_config_problems(path, working_dir, files_visible)
    return tuple(probs), tuple(names)


def _tool_config_problems(path: str, working_dir: str, files_visible: bool) -> tuple[list[Problem], list[str]]:
    """The tool config YAML: its entries, their classes and schemas. Returns (problems, tool names)."""
    full, prob = resolve(TOOL_KEY, path, working_dir, files_visible)
    if full is None:
        return [prob] if prob else [], []
    doc, err = _load_yaml(full)
    fix = "fix the tool config (tools: - class_name: pkg.module.Class, config: {type: native}, tool_schema: {...})"
    if err:
        return [Problem(TOOL_KEY, path, f"cannot be parsed as YAML ({err})", fix)], []
    tools = doc.get("tools") if isinstance(doc, dict) else None
    if not isinstance(tools, list) or not tools:
        return [Problem(TOOL_KEY, path, "has no non-empty `tools:` list (verl reads tools[*].class_name)", fix)], []
    out, names = [], []
    for i, entry in enumerate(tools):
        rule, name = _entry_problem(entry, working_dir)
        if rule:
            out.append(Problem(TOOL_KEY, path, f"tools[{i}]: {rule[0]}", rule[1]))
        elif name in names:
            out.append(Problem(TOOL_KEY, path, f"tools[{i}]: the function name {name!r} is declared twice",
                               "give every tool its own tool_schema.function.name"))
        names.append(name or "")
    return out, [n for n in names if n]


def _load_yaml(path: Path) -> tuple[Any, Optional[str]]:
    """The file as verl reads it (OmegaConf.load), as plain data; or the first line of the error."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False), None
    except Exception as e:  # yaml's and OmegaConf's errors alike
        lines = str(e).strip().splitlines()
        return None, f"{type(e).__name__}: {lines[0] if lines else ''}"[:160]


# --------------------------------------------------------------------------- one tool entry
def _entry_problem(entry: Any, working_dir: str) -> tuple[Optional[tuple[str, str]], Optional[str]]:
    """One ``tools:`` entry: ((rule, fix) or None, its function name or None)."""
    if not isinstance(entry, dict):
        return ("is not a mapping", "write each tool as class_name/config/tool_schema"), None
    cls = entry.get("class_name")
    if not isinstance(cls, str) or "." not in cls:
        return (f"class_name={cls!r} is not a dotted module path (pkg.module.Class)",
                "name the class by its module path in the working_dir, e.g. " + SHIPPED_TOOL), None
    ctype = (entry.get("config") or {}).get("type") if isinstance(entry.get("config"), dict) else None
    if ctype != "native":
        return (f"config.type={ctype!r}: verl 0.9.1 knows only type native (MCP tools were removed)",
                "set config: {type: native}"), None
    found, methods = _class_problem(cls, working_dir)
    if found:
        return found, None
    schema = entry.get("tool_schema")
    if schema is None:
        if methods is not None and "get_openai_tool_schema" not in methods:
            return ("has no tool_schema and its class builds none (BaseTool asserts 'Tool schema is not set!')",
                    "add tool_schema: {type: function, function: {name, description, parameters}}"), None
        return None, None
    return _schema_problem(schema)


def _schema_problem(schema: Any) -> tuple[Optional[tuple[str, str]], Optional[str]]:
    """What verl's OpenAIFunctionToolSchema (pydantic) requires, checked without importing verl."""
    fix = "tool_schema needs type: function and function: {name, description, parameters: {type: object, properties: {...}}}"
    fn = schema.get("function") if isinstance(schema, dict) else None
    if not isinstance(schema, dict) or not isinstance(schema.get("type"), str) or not isinstance(fn, dict):
        return ("tool_schema has no type and function mapping", fix), None
    for field in ("name", "description"):
        if not isinstance(fn.get(field), str) or not fn.get(field):
            return (f"tool_schema.function.{field} is missing (a pydantic ValidationError in verl)", fix), None
    params = fn.get("parameters")
    if params is not None:
        props = params.get("properties") if isinstance(params, dict) else None
        if not isinstance(props, dict) or not isinstance(params.get("type"), str):
            return ("tool_schema.function.parameters needs type and properties", fix), fn["name"]
        bad = [k for k, v in props.items() if not isinstance(v, dict) or "type" not in v]
        if bad:
            return (f"tool_schema.function.parameters.properties.{bad[0]} has no type", fix), fn["name"]
    return None, fn["name"]


# --------------------------------------------------------------------------- the class a tool names
def _class_problem(class_name: str, working_dir: str) -> tuple[Optional[tuple[str, str]], Optional[set[str]]]:
    """Is ``pkg.module.Class`` importable on the cluster? ((rule, fix) or None, the class's methods or None)."""
    module, cls = class_name.rsplit(".", 1)
    if module.split(".")[0] == "verl":
        root = _verl_root()
        if root is None:
            return None, None  # no verl here: nothing to compare with
        found = locate(module, [root.parent])
        if found is None:
            return _missing_verl_module(class_name, module), None
    else:
        found = locate(module, [Path(working_dir)])
        if found is None:
            elsewhere = locate(module, [Path(p) for p in sys.path if p and os.path.isdir(p)])
            if elsewhere is None:
                return (f"class_name={class_name!r}: no module {module!r} in the job's working_dir ({working_dir}) "
                        f"or installed here; verl's AgentLoopWorker would fail on the GPUs ('NoneType' object has "
                        f"no attribute 'loader')",
                        f"put {module.replace('.', '/')}.py in the working_dir (its path there is the module name)"), None
            note(f"tool class {class_name}: {module} is not in the job's working_dir but installed here "
                 f"({elsewhere}); it must be installed on every node of the cluster too")
            found = elsewhere
    return _class_in_module(class_name, found, cls)


def locate(module: str, roots: Sequence[Path]) -> Optional[Path]:
    """The file that defines ``module`` (``a/b.py`` or ``a/b/__init__.py``) under the first root that has it.

    Found on disk, without importing: ``importlib.util.find_spec`` would run the parents' ``__init__``
    (verl's imports torch, 6-16 s).
    """
    rel = Path(*module.split("."))
    for root in roots:
        for cand in (root / rel.parent / f"{rel.name}.py", root / rel / "__init__.py"):
            if cand.is_file():
                return cand
    return None


def _missing_verl_module(class_name: str, module: str) -> tuple[str, str]:
    ver = verl_facts()["version"]
    if module.startswith("verl.tools."):  # gsm8k_tool, geo3k_tool, search_tool, sandbox_fusion_tools, ...
        return (f"class_name={class_name!r}: verl {ver} has no {module}: verl removed its tool implementations before "
                f"0.8 (verl#6302: verl.tools keeps only base_tool, function_tool, schemas, tool_registry), so "
                f"AgentLoopWorker would fail on the GPUs ('NoneType' object has no attribute 'loader')",
                f"ship your own BaseTool subclass in the job's working_dir and name it by its module path there; "
                f"+exp=gsm8k_multiturn_tools ships a GSM8K one: class_name {SHIPPED_TOOL} (rayjobs scripts/multiturn/)")
    return (f"class_name={class_name!r}: verl {ver} has no module {module}",
            "name a class that exists in the pinned verl, or ship your own in the job's working_dir")


def _class_in_module(class_name: str, path: Path, cls: str) -> tuple[Optional[tuple[str, str]], Optional[set[str]]]:
    """The class in the module's source (AST): defined, or at least bound to that name."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, OSError, UnicodeDecodeError, ValueError) as e:
        return (f"class_name={class_name!r}: {path} cannot be parsed as Python ({type(e).__name__})",
                "fix the tool module"), None
    classes: dict[str, ast.ClassDef] = {}
    bound: set[str] = set()
    dynamic = False
    for node in _top_level(tree.body):
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            dynamic |= any(a.name == "*" for a in node.names)
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            dynamic = True
    if cls in classes:
        if not classes[cls].bases and not class_name.startswith("verl."):
            return (f"class_name={class_name!r}: {cls} in {path} has no base class; verl instantiates "
                    f"BaseTool subclasses (verl.tools.base_tool.BaseTool)", f"derive {cls} from BaseTool"), None
        return None, {n.name for n in classes[cls].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if cls in bound or dynamic:
        return None, None  # re-exported or made at import time: fine, but its methods are unknown
    have = sorted(classes)
    return (f"class_name={class_name!r}: {path} defines no {cls}" + (f" (it has: {', '.join(have)})" if have else ""),
            "fix class_name (module path . class name)"), None


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, including those under if/try/with (not inside functions or classes)."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for part in ("body", "orelse", "finalbody"):
                out += _top_level(getattr(node, part, []) or [])
            for handler in getattr(node, "handlers", []) or []:
                out += _top_level(handler.body)
    return out


# --------------------------------------------------------------------------- function tools, data
def _function_tool_problems(path: str, working_dir: str, files_visible: bool) -> list[Problem]:
    """``function_tool_path``: a Python file verl runs as a module, registering its ``@function_tool`` functions."""
    full, prob = resolve(FUNC_KEY, path, working_dir, files_visible)
    if full is None:
        return [prob] if prob else []
    if full.suffix != ".py":
        return [Problem(FUNC_KEY, path, "is not a .py file (verl loads it as a Python module)", "point it at the .py file")]
    try:
        tree = ast.parse(full.read_text(encoding="utf-8"))
    except (SyntaxError, OSError, UnicodeDecodeError, ValueError) as e:
        return [Problem(FUNC_KEY, path, f"cannot be parsed as Python ({type(e).__name__})", "fix the file")]

    def decorated(fn: ast.AST) -> bool:
        decos = getattr(fn, "decorator_list", [])
        names = {getattr(d.func if isinstance(d, ast.Call) else d, a, None) for d in decos for a in ("id", "attr")}
        return "function_tool" in names

    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and decorated(n) for n in _top_level(tree.body)):
        return [Problem(FUNC_KEY, path, "defines no @function_tool function: verl would load no tool from it (it only "
                                        "logs a warning)", "decorate the tool functions with @function_tool")]
    return []


def _tools_kwargs_problems(cfg: Any, data: list[tuple[str, str]], names: Sequence[str]) -> list[Problem]:
    """The rows' ``extra_info.tools_kwargs`` must be keyed by the tools' names (verl passes a tool only its own)."""
    out = []
    for key, f in data:
        keys = _tools_kwargs_keys(f)
        if keys is None:
            note(f"{f}: rows carry no extra_info.tools_kwargs, so the tools get empty create_kwargs (for "
                 f"calc_gsm8k_reward: no ground truth; python -m rayjobs.submit +exp=prepare_data "
                 f"rayjobs.prepare.dataset=gsm8k_tool)")
        elif keys and not keys & set(names):
            out.append(Problem(key, f, f"its rows' extra_info.tools_kwargs are for {', '.join(sorted(keys))}, but the tool "
                                       f"config declares {', '.join(names)}: verl hands a tool only tools_kwargs[<its "
                                       f"name>], so it would get no create_kwargs (silently)",
                               "name the tool's function as the data does, or regenerate the data for this tool"))
    return out


def _tools_kwargs_keys(path: str) -> Optional[set[str]]:
    """The keys of a parquet file's ``extra_info.tools_kwargs`` struct, from its schema (no rows read)."""
    if not path.endswith(".parquet"):
        return set()  # not parquet: not checked
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
    except Exception:  # pyarrow missing or an unreadable file: clusterfiles says so
        return set()
    if "extra_info" not in schema.names or not pa.types.is_struct(schema.field("extra_info").type):
        return None
    info = schema.field("extra_info").type
    if info.get_field_index("tools_kwargs") < 0:
        return None
    kw = info.field("tools_kwargs").type
    return {kw.field(i).name for i in range(kw.num_fields)} if pa.types.is_struct(kw) else set()
