"""An AVL tree of intervals ordered by ``(start, end)`` and augmented with subtree max end.

The ``max_end`` augmentation lets overlap and stabbing queries skip any subtree whose
intervals all end before the query begins, giving ``O(log n + k)`` queries for ``k``
results. Intervals sharing a range share a node, so payload duplicates stay cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .interval import Bounds, Interval

IntervalLike = Interval | tuple[Any, Any] | tuple[Any, Any, Any]


class _Node:
    __slots__ = ("height", "items", "key", "left", "max_end", "right")

    def __init__(self, interval: Interval) -> None:
        self.key: tuple[Any, Any] = interval.key
        self.items: list[Interval] = [interval]
        self.left: _Node | None = None
        self.right: _Node | None = None
        self.height = 1
        self.max_end: Any = interval.end


def _height(node: _Node | None) -> int:
    return node.height if node is not None else 0


def _update(node: _Node) -> None:
    node.height = 1 + max(_height(node.left), _height(node.right))
    node.max_end = node.key[1]
    for child in (node.left, node.right):
        if child is not None and child.max_end > node.max_end:
            node.max_end = child.max_end


def _rotate_right(node: _Node) -> _Node:
    pivot = node.left
    assert pivot is not None
    node.left, pivot.right = pivot.right, node
    _update(node)
    _update(pivot)
    return pivot


def _rotate_left(node: _Node) -> _Node:
    pivot = node.right
    assert pivot is not None
    node.right, pivot.left = pivot.left, node
    _update(node)
    _update(pivot)
    return pivot


def _rebalance(node: _Node) -> _Node:
    _update(node)
    balance = _height(node.left) - _height(node.right)
    if balance > 1:
        assert node.left is not None
        if _height(node.left.left) < _height(node.left.right):
            node.left = _rotate_left(node.left)
        return _rotate_right(node)
    if balance < -1:
        assert node.right is not None
        if _height(node.right.right) < _height(node.right.left):
            node.right = _rotate_right(node.right)
        return _rotate_left(node)
    return node


def _to_interval(value: IntervalLike) -> Interval:
    if isinstance(value, Interval):
        return value
    if isinstance(value, tuple) and len(value) in (2, 3):
        return Interval(*value)
    raise TypeError(f"expected Interval or (start, end[, data]) tuple, got {value!r}")


class IntervalTree:
    """A mutable set of :class:`Interval` objects with overlap, stabbing and envelop queries.

    ``bounds`` must be given explicitly (``"[)"``, ``"[]"`` or a :class:`Bounds`): whether
    touching intervals overlap is a property of the data, not something to default silently.
    """

    def __init__(self, intervals: Iterable[IntervalLike] = (), *, bounds: Bounds | str) -> None:
        self.bounds = Bounds.coerce(bounds)
        self._root: _Node | None = None
        self._size = 0
        for interval in intervals:
            self.insert(interval)

    # -- mutation ---------------------------------------------------------------------

    def insert(self, value: IntervalLike) -> bool:
        """Add an interval; return False if an equal interval (same data too) is present."""
        interval = _to_interval(value)
        self.bounds.check(interval.start, interval.end)
        self._root, added = self._insert(self._root, interval)
        self._size += added
        return added

    def _insert(self, node: _Node | None, interval: Interval) -> tuple[_Node, bool]:
        if node is None:
            return _Node(interval), True
        if interval.key == node.key:
            if interval in node.items:
                return node, False
            node.items.append(interval)
            return node, True
        if interval.key < node.key:
            node.left, added = self._insert(node.left, interval)
        else:
            node.right, added = self._insert(node.right, interval)
        return _rebalance(node), added

    def remove(self, value: IntervalLike) -> None:
        """Remove an interval (payload must match); raise ``KeyError`` if absent."""
        if not self.discard(value):
            raise KeyError(f"interval not in tree: {_to_interval(value)!r}")

    def discard(self, value: IntervalLike) -> bool:
        """Remove an interval if present; return whether it was."""
        interval = _to_interval(value)
        self._root, removed = self._remove(self._root, interval)
        self._size -= removed
        return removed

    def _remove(self, node: _Node | None, interval: Interval) -> tuple[_Node | None, bool]:
        if node is None:
            return None, False
        if interval.key < node.key:
            node.left, removed = self._remove(node.left, interval)
        elif interval.key > node.key:
            node.right, removed = self._remove(node.right, interval)
        else:
            if interval not in node.items:
                return node, False
            node.items.remove(interval)
            if node.items:
                return node, True
            return self._unlink(node), True
        return _rebalance(node), removed

    def _unlink(self, node: _Node) -> _Node | None:
        if node.left is None:
            return node.right
        if node.right is None:
            return node.left
        # Two children: adopt the in-order successor's contents, then delete the successor.
        successor = node.right
        while successor.left is not None:
            successor = successor.left
        node.key, node.items = successor.key, successor.items
        node.right = self._pop_min(node.right)
        return _rebalance(node)

    def _pop_min(self, node: _Node) -> _Node | None:
        if node.left is None:
            return node.right
        node.left = self._pop_min(node.left)
        return _rebalance(node)

    def clear(self) -> None:
        self._root = None
        self._size = 0

    # -- queries ----------------------------------------------------------------------

    def at(self, point: Any) -> list[Interval]:
        """All intervals containing ``point``, in ``(start, end)`` order."""
        found: list[Interval] = []
        self._at(self._root, point, found)
        return found

    def _at(self, node: _Node | None, point: Any, found: list[Interval]) -> None:
        if node is None or not self.bounds.reaches(node.max_end, point):
            return
        self._at(node.left, point, found)
        start, end = node.key
        if start > point:
            return  # this node and its whole right subtree start after the point
        if self.bounds.reaches(end, point):
            found.extend(node.items)
        self._at(node.right, point, found)

    def overlapping(self, start: Any, end: Any) -> list[Interval]:
        """All intervals sharing at least one point with the query range."""
        self.bounds.check(start, end)
        query = Interval(start, end)
        found: list[Interval] = []
        self._overlapping(self._root, query, found)
        return found

    def _overlapping(self, node: _Node | None, query: Interval, found: list[Interval]) -> None:
        if node is None or not self.bounds.reaches(node.max_end, query.start):
            return
        self._overlapping(node.left, query, found)
        if not self.bounds.reaches(query.end, node.key[0]):
            return
        if self.bounds.overlaps(node.items[0], query):
            found.extend(node.items)
        self._overlapping(node.right, query, found)

    def enveloped_by(self, start: Any, end: Any) -> list[Interval]:
        """All intervals lying entirely inside the query range."""
        self.bounds.check(start, end)
        query = Interval(start, end)
        found: list[Interval] = []
        self._enveloped(self._root, query, found)
        return found

    def _enveloped(self, node: _Node | None, query: Interval, found: list[Interval]) -> None:
        if node is None:
            return
        node_start, node_end = node.key
        if node_start >= query.start:
            self._enveloped(node.left, query, found)
        if node_start > query.end:
            return
        if query.start <= node_start and node_end <= query.end:
            found.extend(node.items)
        self._enveloped(node.right, query, found)

    def merged(self, *, touching: bool = False) -> list[Interval]:
        """Union of all intervals as disjoint, sorted intervals without payloads.

        Intervals merge when they overlap under the tree's bounds. In a half-open tree
        ``[1, 3)`` and ``[3, 5)`` do not overlap; pass ``touching=True`` to join them anyway.
        """
        result: list[Interval] = []
        for interval in self:
            if result:
                last = result[-1]
                joins = self.bounds.overlaps(last, interval)
                if joins or (touching and interval.start == last.end):
                    if interval.end > last.end:
                        result[-1] = Interval(last.start, interval.end)
                    continue
            result.append(Interval(interval.start, interval.end))
        return result

    def span(self) -> Interval | None:
        """Smallest interval covering every stored interval, or ``None`` when empty."""
        if self._root is None:
            return None
        node = self._root
        while node.left is not None:
            node = node.left
        return Interval(node.key[0], self._root.max_end)

    # -- container protocol -----------------------------------------------------------

    @property
    def height(self) -> int:
        return _height(self._root)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __contains__(self, value: object) -> bool:
        try:
            interval = _to_interval(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        node = self._root
        while node is not None:
            if interval.key == node.key:
                return interval in node.items
            node = node.left if interval.key < node.key else node.right
        return False

    def __iter__(self) -> Iterator[Interval]:
        """In ``(start, end)`` order; same-range intervals in insertion order."""
        stack: list[_Node] = []
        node = self._root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            yield from node.items
            node = node.right

    def __repr__(self) -> str:
        return f"IntervalTree({len(self)} intervals, bounds={self.bounds.value!r})"

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` if ordering, balance, heights or max ends are wrong."""
        count = self._check(self._root, None, None)
        if count != self._size:
            raise AssertionError(f"size {self._size} but {count} intervals stored")

    def _check(self, node: _Node | None, low: Any, high: Any) -> int:
        if node is None:
            return 0
        if (low is not None and node.key <= low) or (high is not None and node.key >= high):
            raise AssertionError(f"key {node.key} out of order")
        left = self._check(node.left, low, node.key)
        right = self._check(node.right, node.key, high)
        if abs(_height(node.left) - _height(node.right)) > 1:
            raise AssertionError(f"node {node.key} is unbalanced")
        expected_height, expected_max = node.height, node.max_end
        _update(node)
        if (node.height, node.max_end) != (expected_height, expected_max):
            raise AssertionError(f"stale height or max_end at {node.key}")
        return left + right + len(node.items)
