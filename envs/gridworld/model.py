"""The gridworld's model: layout, options, transition tables and the counter-based RNG.

Both implementations (the single :class:`~constrained_grpo.envs.gridworld.env.GridWorldEnv`
and the batched :class:`~constrained_grpo.envs.gridworld.batched.BatchedGridWorld`) and the
exact LP solver read the same :class:`GridModel`, so their semantics agree by construction
(and are tested equal).

Layout characters::

    S start   G goal (+goal_reward, ends the episode)   # wall
    H hazard  M mud   $ gem (+gem_reward, once)          . free

Dynamics of one step from cell ``s`` with action ``a`` (0 up, 1 down, 2 left, 3 right):

1. with probability ``slip`` the action is replaced by a uniformly random one;
2. the agent moves, or stays if the move leaves the grid or hits a wall;
3. on a hazard cell a *hazard event* happens with probability ``hazard_prob``;
4. reward = goal_reward [goal] + gem_reward [first visit of $] - step_penalty;
5. costs: ``hazard`` = event (indicator: only the first event of the episode),
   ``fuel`` = 1 per step, ``mud`` = on a mud cell (indicator: first mud step only);
6. the episode terminates on the goal and is truncated after ``max_steps`` steps.

Random draws are counter based: draw ``j`` at step ``t`` of an episode with key ``k`` is
``splitmix64(k + (4 t + j + 1) * GAMMA)``, so any implementation that knows the
episode key reproduces the same draws, B grids at once or one at a time.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from constrained_grpo.constraints import Constraint, ConstraintError, override_limits
from constrained_grpo.options import check_options, option_names
from constrained_grpo.sampling import GAMMA, MASK64, splitmix64

__all__ = [
    "ACTIONS",
    "COST_NAMES",
    "GridModel",
    "GridOptions",
    "default_layout",
    "splitmix64",
    "draws_below",
    "draw_counters",
    "counters_below",
    "uniform_draw",
]

DRAW_GAMMA = 0xD1B54A32D192ED03
EPISODE_GAMMA = 0xA0761D6478BD642F
STEP_COUNTER = np.uint64((4 * DRAW_GAMMA) & MASK64)

#: (row, col) offsets of actions 0..3: up, down, left, right.
ACTIONS: tuple[tuple[int, int], ...] = ((-1, 0), (1, 0), (0, -1), (0, 1))
ACTION_NAMES = ("up", "down", "left", "right")

#: The costs a gridworld can report, with their descriptions (cumulative, indicator).
COST_NAMES: dict[str, tuple[str, str]] = {
    "hazard": (
        "hazard events (a step onto an H cell triggers one with probability hazard_prob)",
        "an episode with a hazard event (cost 1 at the first event)",
    ),
    "fuel": ("fuel used: 1 per step", "fuel used: 1 per step"),
    "mud": ("steps onto mud (M) cells", "an episode that entered mud (cost 1 at the first mud step)"),
}

#: Largest side of a grid (and largest cell count, squared), so that a mistyped size
#: fails at once instead of filling memory.
MAX_SIZE = 64

# Draw indices within a step.
DRAW_SLIP, DRAW_SLIP_ACTION, DRAW_HAZARD = 0, 1, 2


def uniform_draw(key: Any, t: Any, j: int) -> Any:
    """Draw ``j`` of step ``t`` of the episode with key ``key``: a float in [0, 1).

    Works on Python ints (one grid) and on numpy arrays (``key`` uint64, ``t`` int64).
    """
    if isinstance(key, np.ndarray):
        return uniform_draws(key, t, (j,))[:, 0]
    x = (key + ((4 * t + j + 1) * DRAW_GAMMA)) & MASK64
    return (splitmix64(x) >> 11) * (1.0 / (1 << 53))


def uniform_draws(keys: np.ndarray, t: np.ndarray, js: tuple[int, ...]) -> np.ndarray:
    """Draws ``js`` of step ``t`` for B episodes at once: float64 array ``(B, len(js))``.

    Equal to ``uniform_draw(key_i, t_i, j)`` element by element; one pass of the hash
    over all draws costs far fewer numpy calls than one pass per draw.
    """
    counter = (np.asarray(t, dtype=np.uint64) * np.uint64(4))[:, None] + np.asarray(js, dtype=np.uint64) + np.uint64(1)
    x = keys[:, None] + counter * np.uint64(DRAW_GAMMA)
    return (splitmix64(x) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def draw_counters(keys: np.ndarray, t: Any, j: int) -> np.ndarray:
    """The hash inputs ``k + (4 t + j + 1) * DRAW_GAMMA`` of draw ``j`` at step ``t`` (uint64).

    Step t + 1's input is step t's plus ``STEP_COUNTER``, so a batched env can keep them
    as state and advance them with one addition.
    """
    x = np.asarray(t, dtype=np.uint64) * STEP_COUNTER
    x += keys
    x += np.uint64(((j + 1) * DRAW_GAMMA) & MASK64)
    return x


def counters_below(x: np.ndarray, p: float) -> np.ndarray:
    """``(splitmix64(x) >> 11) 2^-53 < p`` elementwise, in integers: bool array.

    ``u = (h >> 11) 2^-53 < p`` iff ``h >> 11 < ceil(p 2^53)`` iff ``h < ceil(p 2^53) 2^11``
    (exact for 0 <= p < 1), which skips the float conversion.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"counters_below needs 0 <= p < 1, got {p!r}")
    return splitmix64(x) < np.uint64(math.ceil(p * float(1 << 53)) << 11)


def draws_below(keys: np.ndarray, t: Any, j: int, p: float) -> np.ndarray:
    """``uniform_draw(key_i, t_i, j) < p`` for B episodes at once: bool ``(B,)``."""
    return counters_below(draw_counters(keys, t, j), p)


def seed_key(seed: int) -> int:
    """Episode key for ``reset(seed=seed)``."""
    return splitmix64((int(seed) * EPISODE_GAMMA) & MASK64)


def next_key(key: Any) -> Any:
    """Key of the episode after the one with ``key`` (a reset without a seed)."""
    if isinstance(key, np.ndarray):
        return splitmix64(key + np.uint64(EPISODE_GAMMA))
    return splitmix64((key + EPISODE_GAMMA) & MASK64)


def default_layout(size: int) -> tuple[str, ...]:
    """The ``size`` x ``size`` route-choice layout.

    Start bottom-left, goal bottom-right. The short route along the bottom row crosses
    hazards; the row above is mud; the gem sits in the middle of the top row, on the
    longest, safe route. For size 3::

        .$.
        .M.
        SHG
    """
    if not isinstance(size, (int, np.integer)) or size < 3:
        raise ValueError(f"grid size must be an integer >= 3, got {size!r}")
    n = int(size)
    top = ["."] * n
    top[n // 2] = "$"
    rows = ["".join(top)]
    rows += ["." * n for _ in range(n - 3)]
    rows.append("." + "M" * (n - 2) + ".")
    rows.append("S" + "H" * (n - 2) + "G")
    return tuple(rows)


@dataclass(frozen=True)
class GridOptions:
    """Every option of a gridworld task (all are ``gymnasium.make`` keywords).

    Attributes:
        size: side of the default layout (ignored when ``layout`` is given).
        layout: rows of the map (see the module docstring), or None for the default.
        constraints: which costs are constraints, in order; names from
            ``hazard``, ``fuel``, ``mud``.
        limits: ``{name: limit}`` or one limit per constraint; defaults per task.
        indicator: hazard and mud are indicator costs (cost 1 at most once per
            episode; the limit is a violation probability) rather than cumulative.
        slip: probability that an action is replaced by a uniformly random one.
        hazard_prob: probability that a step onto a hazard cell is a hazard event.
        goal_reward, gem_reward, step_penalty: the reward terms.
        max_steps: truncation horizon (default: 4 x the larger side).
        default_limits: the task variant's limits, which ``limits`` overrides by name.
        obs_mode: ``onehot`` (one-hot cell) or ``coords`` (row and column in [0, 1]);
            both are followed by the flags [gem taken, hazard event, mud entered] and
            the elapsed-time fraction t / max_steps, which make the state Markov.
    """

    size: int = 8
    layout: tuple[str, ...] | None = None
    constraints: tuple[str, ...] = ("hazard", "fuel")
    limits: Mapping[str, float] | tuple[float, ...] | None = None
    indicator: bool = True
    slip: float = 0.0
    hazard_prob: float = 1.0
    goal_reward: float = 1.0
    gem_reward: float = 0.5
    step_penalty: float = 0.0
    max_steps: int | None = None
    obs_mode: str = "onehot"
    default_limits: Mapping[str, float] = field(default_factory=dict)

    def key(self) -> tuple[Any, ...]:
        """A hashable identity of the options (for caching the exact optimum)."""
        lim = self.limits
        lim_key = tuple(sorted(lim.items())) if isinstance(lim, Mapping) else lim
        return (
            self.size, self.layout, self.constraints, lim_key, self.indicator, self.slip,
            self.hazard_prob, self.goal_reward, self.gem_reward, self.step_penalty,
            self.max_steps, self.obs_mode, tuple(sorted(self.default_limits.items())),
        )


@dataclass(frozen=True)
class GridTables:
    """The dynamics as lookup tables over ``i = (s * 4 + a) * 2 + hit``.

    ``s = 8 * cell + flags`` is the state (without time), ``a`` the action actually
    taken (after slip) and ``hit`` whether a hazard cell entered by this step fires a
    hazard event (ignored elsewhere).

    Attributes:
        next_state, reward, costs (n, K), terminated: the step's outcome.
        obs: observation row of every state, time column left at 0.
        start_state: ``8 * start``.
        relevant_flags: bit mask of the flags that rewards or costs depend on.
    """

    next_state: np.ndarray
    reward: np.ndarray
    costs: np.ndarray
    terminated: np.ndarray
    obs: np.ndarray
    start_state: int
    relevant_flags: int


class GridModel:
    """Parsed layout plus the tables both implementations and the LP use."""

    OBS_MODES = ("onehot", "coords")

    def __init__(self, options: GridOptions):
        self.options = options
        o = options
        for name, value, low, high in (
            ("slip", o.slip, 0.0, 1.0),
            ("hazard_prob", o.hazard_prob, 0.0, 1.0),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
                raise ValueError(f"{name}={value!r} must be a probability in [{low}, {high}]")
        for name in ("goal_reward", "gem_reward", "step_penalty"):
            value = getattr(o, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ValueError(f"{name}={value!r} must be a finite number")
        if o.obs_mode not in self.OBS_MODES:
            raise ValueError(f"obs_mode={o.obs_mode!r} is not one of {self.OBS_MODES}")

        if o.layout is None and isinstance(o.size, (int, np.integer)) and o.size > MAX_SIZE:
            # The tables grow as 64 size^2 entries and the one-hot observation as size^2.
            raise ValueError(f"size={o.size!r} is too large: grid sizes go up to {MAX_SIZE} ({MAX_SIZE ** 2} cells)")
        rows = tuple(o.layout) if o.layout is not None else default_layout(o.size)
        if not rows or any(len(r) != len(rows[0]) for r in rows):
            raise ValueError(f"layout rows must be non-empty and of equal length, got {rows!r}")
        if len(rows) * len(rows[0]) > MAX_SIZE**2:
            raise ValueError(
                f"layout of {len(rows)} x {len(rows[0])} cells is too large: at most {MAX_SIZE ** 2} cells"
            )
        allowed = set("SGH M$.#".replace(" ", ""))
        bad = sorted({ch for r in rows for ch in r} - allowed)
        if bad:
            raise ValueError(f"layout has unknown character(s) {bad}; allowed: {sorted(allowed)}")
        flat = "".join(rows)
        if flat.count("S") != 1 or flat.count("G") < 1:
            raise ValueError(
                f"layout needs exactly one start 'S' and at least one goal 'G', got {flat.count('S')} "
                f"start(s) and {flat.count('G')} goal(s) in {rows!r}"
            )
        if flat.count("$") > 1:
            raise ValueError(f"layout may hold at most one gem '$', got {flat.count('$')}")
        self.layout = rows
        self.n_rows, self.n_cols = len(rows), len(rows[0])
        self.n_cells = self.n_rows * self.n_cols
        self.start = flat.index("S")
        self.is_wall = np.array([ch == "#" for ch in flat])
        self.is_goal = np.array([ch == "G" for ch in flat])
        self.is_hazard = np.array([ch == "H" for ch in flat])
        self.is_mud = np.array([ch == "M" for ch in flat])
        self.is_gem = np.array([ch == "$" for ch in flat])

        nxt = np.empty((self.n_cells, 4), dtype=np.int64)
        for cell in range(self.n_cells):
            r, c = divmod(cell, self.n_cols)
            for a, (dr, dc) in enumerate(ACTIONS):
                rr, cc = r + dr, c + dc
                ok = 0 <= rr < self.n_rows and 0 <= cc < self.n_cols and not self.is_wall[rr * self.n_cols + cc]
                nxt[cell, a] = rr * self.n_cols + cc if ok else cell
        self.next_cell = nxt
        self._check_reachable()

        self.max_steps = int(o.max_steps) if o.max_steps is not None else 4 * max(self.n_rows, self.n_cols)
        if self.max_steps < 1:
            raise ValueError(f"max_steps={o.max_steps!r} must be >= 1")

        unknown = [c for c in o.constraints if c not in COST_NAMES]
        if unknown or not o.constraints or len(set(o.constraints)) != len(o.constraints):
            raise ConstraintError(
                f"constraints={tuple(o.constraints)!r} must be distinct names from {list(COST_NAMES)}"
            )
        declared = []
        for name in o.constraints:
            indicator = o.indicator and name != "fuel"
            description = COST_NAMES[name][1 if indicator else 0]
            limit = o.default_limits.get(name, self.default_limit(name, indicator))
            declared.append(Constraint(name, limit, description, indicator))
        self.constraints: tuple[Constraint, ...] = override_limits(declared, o.limits)
        self.cost_names = tuple(c.name for c in self.constraints)

        # Observation layout: position features, 3 flags, time fraction.
        self.pos_dim = self.n_cells if o.obs_mode == "onehot" else 2
        self.obs_dim = self.pos_dim + 4
        rr, cc = np.divmod(np.arange(self.n_cells), self.n_cols)
        self.coords = np.stack(
            [rr / max(self.n_rows - 1, 1), cc / max(self.n_cols - 1, 1)], axis=1
        ).astype(np.float32)

    def _check_reachable(self) -> None:
        """Breadth-first search from the start; sets ``shortest_path`` (steps to a goal)."""
        dist = {self.start: 0}
        queue = deque([self.start])
        while queue:
            cell = queue.popleft()
            for nxt in self.next_cell[cell]:
                if int(nxt) not in dist:
                    dist[int(nxt)] = dist[cell] + 1
                    queue.append(int(nxt))
        goals = [d for c, d in dist.items() if self.is_goal[c]]
        if not goals:
            raise ValueError(
                f"impossible grid: no goal 'G' is reachable from the start 'S' in layout "
                f"{self.layout!r}; open a path through the walls '#'"
            )
        self.shortest_path = min(goals)

    def default_limit(self, name: str, indicator: bool) -> float:
        """Default limit of a cost: hazard 0.1 (indicator) or 0.5 events; mud 0.2 or 1.0
        steps; fuel 1.7 x the shortest path (rounded), so that the long gem route breaks it."""
        if name == "fuel":
            return float(round(1.7 * self.shortest_path))
        return {"hazard": (0.5, 0.1), "mud": (1.0, 0.2)}[name][int(indicator)]

    @cached_property
    def initial_obs(self) -> np.ndarray:
        obs = np.zeros(self.obs_dim, dtype=np.float32)
        obs[: self.pos_dim] = self.position_features(self.start)
        return obs

    def position_features(self, cell: int) -> np.ndarray:
        if self.options.obs_mode == "onehot":
            out = np.zeros(self.n_cells, dtype=np.float32)
            out[cell] = 1.0
            return out
        return self.coords[cell].copy()

    # --- tabular form over state index s = 8 * cell + flags -----------------------
    # flags bit 0: gem taken, bit 1: hazard event seen, bit 2: mud entered.

    @cached_property
    def tables(self) -> "GridTables":
        """Transition tables indexed by ``(s * 4 + a) * 2 + hit`` (see :class:`GridTables`)."""
        o = self.options
        n_states = self.n_cells * 8
        k = len(self.constraints)
        size = n_states * 4 * 2
        next_state = np.zeros(size, dtype=np.int64)
        reward = np.zeros(size, dtype=np.float64)
        costs = np.zeros((size, k), dtype=np.float64)
        terminated = np.zeros(size, dtype=bool)
        for s in range(n_states):
            cell, flags = divmod(s, 8)
            gem, hseen, mseen = bool(flags & 1), bool(flags & 2), bool(flags & 4)
            for a in range(4):
                nxt = int(self.next_cell[cell, a])
                for hit in (0, 1):
                    i = (s * 4 + a) * 2 + hit
                    hazard = bool(self.is_hazard[nxt]) and bool(hit)
                    mud = bool(self.is_mud[nxt])
                    r = -o.step_penalty + (o.goal_reward if self.is_goal[nxt] else 0.0)
                    if self.is_gem[nxt] and not gem:
                        r += o.gem_reward
                    for j, con in enumerate(self.constraints):
                        if con.name == "fuel":
                            costs[i, j] = 1.0
                        elif con.name == "hazard":
                            costs[i, j] = float(hazard and not (con.indicator and hseen))
                        else:
                            costs[i, j] = float(mud and not (con.indicator and mseen))
                    new_flags = (
                        (gem or bool(self.is_gem[nxt])) * 1
                        + (hseen or hazard) * 2
                        + (mseen or mud) * 4
                    )
                    next_state[i] = nxt * 8 + new_flags
                    reward[i] = r
                    terminated[i] = bool(self.is_goal[nxt])
        obs = np.zeros((n_states, self.obs_dim), dtype=np.float32)
        for s in range(n_states):
            cell, flags = divmod(s, 8)
            obs[s, : self.pos_dim] = self.position_features(cell)
            obs[s, self.pos_dim : self.pos_dim + 3] = [flags & 1, (flags >> 1) & 1, (flags >> 2) & 1]
        # Flag bits that rewards and costs can depend on; the others only show in the
        # observation, so the LP may merge states that differ in them.
        relevant = 0
        if bool(self.is_gem.any()) and o.gem_reward != 0.0:
            relevant |= 1
        for con in self.constraints:
            if con.indicator:
                relevant |= {"hazard": 2, "mud": 4}[con.name]
        return GridTables(next_state, reward, costs, terminated, obs, self.start * 8, relevant)

    def render_ascii(self, cell: int) -> str:
        rows = [list(r) for r in self.layout]
        r, c = divmod(cell, self.n_cols)
        rows[r][c] = "A"
        return "\n".join("".join(r) for r in rows)


def task_options(kwargs: Mapping[str, Any]) -> GridOptions:
    """Options from ``gymnasium.make`` keywords; a misspelled keyword is an error."""
    check_options(kwargs, option_names(GridOptions), "gridworld", error=TypeError)
    merged = dict(kwargs)
    if merged.get("layout") is not None:
        merged["layout"] = tuple(merged["layout"])
    merged["constraints"] = tuple(merged.get("constraints", GridOptions.constraints))
    if isinstance(merged.get("limits"), Sequence) and not isinstance(merged.get("limits"), str):
        merged["limits"] = tuple(merged["limits"])
    if isinstance(merged.get("limits"), Mapping):
        merged["limits"] = dict(merged["limits"])
    merged["default_limits"] = dict(merged.get("default_limits") or {})
    return GridOptions(**merged)
