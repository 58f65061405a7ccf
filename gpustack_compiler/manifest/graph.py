"""The dependency graph: `variable -FEEDS-> relation -DEFINES-> variable`, behind a small wrapper.

Node keys are stable strings (`v:` variables and constants, `r:` relations). Constraints are kept
apart from the data flow: they constrain variables but feed nothing.

Neighbours and cones are read from plain adjacency dicts; networkx is imported and its graph built
only for the algorithms (cycles, topological order), which `show`, `cone` and a resolution never
need: importing it costs more than such a command's own work.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

V, R = "v:", "r:"


@dataclass(frozen=True)
class RelationEdges:
    name: str
    kind: str
    inputs: tuple[str, ...]
    output: str | None  # None for constraints


@dataclass(frozen=True)
class RootDebt:
    name: str
    family: str | None
    category: str | None
    weight: int


@dataclass(frozen=True)
class FamilyDebt:
    family: str
    weight: int
    roots: int
    heaviest: tuple[str, ...]


class CatalogGraph:
    def __init__(self, variables: Iterable[str], constants: Iterable[str], relations: Iterable[RelationEdges]):
        self.variables = sorted(variables)
        self.constants = sorted(constants)
        # Nodes, then edges in the order networkx.DiGraph would store them (dicts as ordered sets), so
        # neighbours come in the same order from these dicts as from `flow`.
        self._succ: dict[str, dict[str, None]] = {}
        self._pred: dict[str, dict[str, None]] = {}
        self._edges: list[tuple[str, str]] = []
        for n in [*self.variables, *self.constants]:
            self._add_node(V + n)
        for rel in relations:
            if rel.output is None:
                continue  # constraints constrain variables but feed nothing
            node = R + rel.name
            self._add_node(node)
            for i in rel.inputs:
                self._add_edge(V + i, node)
            self._add_edge(node, V + rel.output)
        self._order: list[str] | None = None
        self._bits: dict[str, int] | None = None
        self._acyclic: bool | None = None

    def _add_node(self, node: str) -> None:
        if node not in self._succ:
            self._succ[node], self._pred[node] = {}, {}

    def _add_edge(self, u: str, v: str) -> None:
        self._add_node(u)
        self._add_node(v)
        self._succ[u][v] = None
        self._pred[v][u] = None
        self._edges.append((u, v))

    @cached_property
    def flow(self):
        """The same graph as a networkx.DiGraph, built in the same order, for its algorithms."""
        import networkx as nx

        flow = nx.DiGraph()
        flow.add_nodes_from(self._succ)
        flow.add_edges_from(self._edges)
        return flow

    # ---- structure ---------------------------------------------------------------------------
    def definitions(self, var: str) -> list[str]:
        return sorted(p[len(R):] for p in self._pred[V + var])

    def users(self, var: str) -> list[str]:
        return sorted(s[len(R):] for s in self._succ[V + var])

    @property
    def roots(self) -> list[str]:
        return [v for v in self.variables if not self._pred[V + v]]

    @property
    def leaves(self) -> list[str]:
        return [v for v in self.variables if not self._succ[V + v]]

    def cycles(self) -> list[list[str]]:
        """One cycle per strongly connected component, as variable and relation names."""
        import networkx as nx

        found = []
        for comp in nx.strongly_connected_components(self.flow):
            if len(comp) == 1:
                node = next(iter(comp))
                if not self.flow.has_edge(node, node):
                    continue
            sub = self.flow.subgraph(comp)
            nodes = [u for u, _ in nx.find_cycle(sub)]
            start = nodes.index(min(n for n in nodes if n.startswith(V)))
            nodes = nodes[start:] + nodes[:start]
            found.append([n[2:] for n in nodes + nodes[:1]])
        return sorted(found)

    def topological_order(self) -> list[str]:
        if self._order is None:
            import networkx as nx

            self._order = list(nx.lexicographical_topological_sort(self.flow))
        return self._order

    def is_acyclic(self) -> bool:
        if self._acyclic is None:
            import networkx as nx

            self._acyclic = nx.is_directed_acyclic_graph(self.flow)
        return self._acyclic

    # ---- cones -------------------------------------------------------------------------------
    def cone(self, var: str, upstream: bool = True, depth: int | None = None) -> dict[str, int]:
        """Variables and constants reachable from `var`, with the number of relations crossed."""
        step = self._pred if upstream else self._succ
        start = V + var
        if start not in step:
            raise KeyError(var)
        seen = {start: 0}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            d = seen[node]
            if depth is not None and node.startswith(V) and d >= depth:
                continue
            for nxt in step[node]:
                if nxt not in seen:
                    seen[nxt] = d + 1 if nxt.startswith(V) else d
                    queue.append(nxt)
        return {n[len(V):]: d for n, d in seen.items() if n.startswith(V) and n != start}

    def cone_relations(self, var: str, upstream: bool = True) -> list[str]:
        import networkx as nx

        nodes = nx.ancestors(self.flow, V + var) if upstream else nx.descendants(self.flow, V + var)
        return sorted(n[len(R):] for n in nodes if n.startswith(R))

    # ---- root debt ---------------------------------------------------------------------------
    def _postorder(self) -> list[str] | None:
        """Every node after all of its successors, or None if the graph has a cycle. Any such order
        serves the bitsets below, and a depth-first walk finds one in a fraction of the time of the
        lexicographic sort `topological_order` keeps for printing."""
        finished: dict[str, bool] = {}  # False while the node is on the walk's stack
        out: list[str] = []
        for start in self._succ:
            if start in finished:
                continue
            finished[start] = False
            stack = [(start, iter(self._succ[start]))]
            while stack:
                node, successors = stack[-1]
                for nxt in successors:
                    state = finished.get(nxt)
                    if state is None:
                        finished[nxt] = False
                        stack.append((nxt, iter(self._succ[nxt])))
                        break
                    if not state:
                        return None
                else:
                    stack.pop()
                    finished[node] = True
                    out.append(node)
        return out

    def _downstream_bits(self) -> dict[str, int] | None:
        """Per variable node, a bitset of the variables strictly downstream of it; None with a cycle."""
        if self._bits is None and self._acyclic is not False:
            order = self._postorder()
            if order is None:
                self._acyclic = False
                return None
            index = {n: i for i, n in enumerate(V + v for v in self.variables)}
            bits: dict[str, int] = {}
            for node in order:
                acc = 0
                for succ in self._succ[node]:
                    acc |= bits[succ]
                    if succ in index:
                        acc |= 1 << index[succ]
                bits[node] = acc
            self._bits = bits
        return self._bits  # None once a cycle is known

    def downstream_set(self, var: str) -> int:
        bits = self._downstream_bits()
        if bits is not None:
            return bits[V + var]
        import networkx as nx

        index = {n: i for i, n in enumerate(self.variables)}
        acc = 0
        for n in nx.descendants(self.flow, V + var):
            if n.startswith(V) and n[len(V):] in index:
                acc |= 1 << index[n[len(V):]]
        return acc

    def root_debt(self, meta: dict[str, tuple[str | None, str | None]]) -> list[RootDebt]:
        """`meta`: root -> (family, category) for the roots to rank. Heaviest first, then by name."""
        rows = [RootDebt(r, family, category, self.downstream_set(r).bit_count())
                for r, (family, category) in meta.items()]
        return sorted(rows, key=lambda r: (-r.weight, r.name))

    def family_debt(self, meta: dict[str, tuple[str | None, str | None]], top: int = 3) -> list[FamilyDebt]:
        """A family's weight is the size of the union of its roots' downstream cones."""
        by_family: dict[str, list[RootDebt]] = {}
        for row in self.root_debt(meta):
            by_family.setdefault(row.family or "(undeclared)", []).append(row)
        out = []
        for family, rows in by_family.items():
            union = 0
            for row in rows:
                union |= self.downstream_set(row.name)
            out.append(FamilyDebt(family, union.bit_count(), len(rows), tuple(r.name for r in rows[:top])))
        return sorted(out, key=lambda f: (-f.weight, f.family))
