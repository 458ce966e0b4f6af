"""The journal's Merkle tree cut into C2SP tlog-tiles: layout, reading and appending.

Pure Python and stdlib only, like `.merkle`, so the standalone verifier reads exported tiles
with it; `.tree` keeps the same tiles in PostgreSQL.

Layout (https://c2sp.org/tlog-tiles, tile height 8): a tile holds up to 256 hashes of one
level. Level 0 tiles hold the leaf hashes, tile N the leaves [256 N, 256 N + 256). Level L
tiles hold the roots of the full tiles of level L - 1, so entry j of level L is the root of the
perfect subtree of height 8 L over leaves [j 256^L, (j + 1) 256^L). A tree of n leaves has
n >> 8L entries at level L: that many // 256 full tiles and, for the remainder, one partial
tile on the right edge, which grows until it is full. Full tiles never change.

Every hash a proof or a root needs is then one entry or the root of at most 128 neighbouring
entries of one tile, and a root or proof reads O(log n) tiles (one per level on the right
edge, one or two per level along a leaf's path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from .merkle import EMPTY_ROOT, HASH_SIZE, node_hash

__all__ = [
    "TILE_BYTES",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "MissingTile",
    "TileAppender",
    "TileKey",
    "TileReader",
    "entries_at",
    "read_planned",
    "tile_path",
    "tile_root",
    "tiles_of",
]

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
TILE_BYTES = TILE_WIDTH * HASH_SIZE
TileKey = tuple[int, int]
"""(level, index) of a tile."""
_T = TypeVar("_T")


class MissingTile(LookupError):
    """A tile, or the entries of it a hash needs, is not there."""

    def __init__(self, key: TileKey, needed: int) -> None:
        super().__init__(f"tile {key[0]}/{key[1]}: {needed} hashes needed, not held")
        self.key = key


def entries_at(size: int, level: int) -> int:
    """How many hashes level `level` of a tree of `size` leaves holds."""
    return size >> (TILE_HEIGHT * level)


def tiles_of(size: int) -> Iterator[tuple[int, int, int]]:
    """(level, index, width) of every tile of a tree of `size` leaves, level by level; a width
    below `TILE_WIDTH` is the right edge's partial tile."""
    level = 0
    while (count := entries_at(size, level)) > 0:
        for index in range(count // TILE_WIDTH):
            yield level, index, TILE_WIDTH
        if count % TILE_WIDTH:
            yield level, count // TILE_WIDTH, count % TILE_WIDTH
        level += 1


def tile_path(level: int, index: int, width: int = TILE_WIDTH) -> str:
    """The tile's path in the tlog-tiles layout: `tile/<L>/<N>[.p/<W>]`, N in 3-digit path
    elements, all but the last prefixed with `x` (1234067: `x001/x234/067`)."""
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    path = f"tile/{level}/" + "/".join(reversed(groups))
    return path if width == TILE_WIDTH else f"{path}.p/{width}"


def tile_root(hashes: bytes) -> bytes:
    """MTH of a power-of-two run of hashes (a full tile's root is the next level's entry)."""
    level = hashes
    while len(level) > HASH_SIZE:
        level = b"".join(
            node_hash(level[i : i + HASH_SIZE], level[i + HASH_SIZE : i + 2 * HASH_SIZE])
            for i in range(0, len(level), 2 * HASH_SIZE)
        )
    return level


class TileReader:
    """The hashes of the tree of `size` leaves, read from its tiles.

    `tiles` maps (level, index) to a tile's hashes; a tile may be wider than this tree needs (it
    grew since), only its first entries are read. With `tiles` None the reader plans: it
    records in `wanted` which tiles it would read and hashes zeros, so a caller fetches just
    those and runs again (`read_planned`).
    """

    def __init__(self, size: int, tiles: Mapping[TileKey, bytes] | None = None) -> None:
        self.size = size
        self.wanted: set[TileKey] = set()
        self._tiles = tiles

    def node(self, height: int, index: int) -> bytes:
        """The root of the perfect subtree of `height` over leaves [index 2^h, (index+1) 2^h)."""
        if (index + 1) << height > self.size:
            raise ValueError(f"node {height}/{index} is not in a tree of {self.size} leaves")
        level, rest = divmod(height, TILE_HEIGHT)
        first, count = index << rest, 1 << rest
        key = (level, first // TILE_WIDTH)
        offset = (first % TILE_WIDTH) * HASH_SIZE
        if self._tiles is None:
            self.wanted.add(key)
            return bytes(HASH_SIZE)
        tile = self._tiles.get(key)
        if tile is None or len(tile) < offset + count * HASH_SIZE:
            raise MissingTile(key, first % TILE_WIDTH + count)
        return tile_root(tile[offset : offset + count * HASH_SIZE])

    def leaf(self, index: int) -> bytes:
        return self.node(0, index)

    def subtree(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]): perfect aligned subtrees are nodes, others split as RFC 6962."""
        length = end - start
        if length & (length - 1) == 0 and start % length == 0:
            return self.node(length.bit_length() - 1, start // length)
        k = 1 << ((length - 1).bit_length() - 1)
        return node_hash(self.subtree(start, start + k), self.subtree(start + k, end))

    def root(self) -> bytes:
        return EMPTY_ROOT if self.size == 0 else self.subtree(0, self.size)

    def compact_range(self) -> list[bytes]:
        """The roots of the perfect subtrees of `size`'s binary digits, largest first."""
        nodes, start = [], 0
        for height in reversed(range(self.size.bit_length())):
            if self.size >> height & 1:
                nodes.append(self.node(height, start >> height))
                start += 1 << height
        return nodes


def read_planned(
    size: int,
    use: Callable[[TileReader], _T],
    fetch: Callable[[set[TileKey]], Mapping[TileKey, bytes]],
) -> _T:
    """`use(reader)` over the tiles `fetch` returns for the keys a planning run wanted."""
    planner = TileReader(size)
    use(planner)
    return use(TileReader(size, fetch(planner.wanted)))


class TileAppender:
    """Appends leaves to a tree of `size` leaves given its right edge, the partial tile of each
    level (`edge`; wider tiles are cut to the tree's width). `tiles()` is what changed: the
    tiles that filled and the partial tiles that grew, which are all a store must write."""

    def __init__(self, size: int, edge: Mapping[TileKey, bytes]) -> None:
        self.size = size
        self._counts: list[int] = []
        self._partial: list[bytearray] = []
        self._full: dict[TileKey, bytes] = {}
        self._grown: set[int] = set()
        level = 0
        while (count := entries_at(size, level)) > 0:
            width = count % TILE_WIDTH
            key = (level, count // TILE_WIDTH)
            held = edge.get(key, b"") if width else b""
            if len(held) < width * HASH_SIZE:
                raise MissingTile(key, width)
            self._counts.append(count)
            self._partial.append(bytearray(held[: width * HASH_SIZE]))
            level += 1

    def append(self, leaf: bytes) -> None:
        """Add the next leaf hash (already `leaf_hash`-ed)."""
        level, entry = 0, leaf
        while True:
            if level == len(self._counts):
                self._counts.append(0)
                self._partial.append(bytearray())
            partial = self._partial[level]
            partial += entry
            self._counts[level] += 1
            self._grown.add(level)
            if len(partial) < TILE_BYTES:
                break
            index = (self._counts[level] - 1) // TILE_WIDTH
            self._full[(level, index)] = bytes(partial)
            entry = tile_root(bytes(partial))
            partial.clear()
            level += 1
        self.size += 1

    def full_held(self) -> int:
        return len(self._full)

    def take_full(self) -> dict[TileKey, bytes]:
        """The tiles that filled since the start or the last call (forgotten here after)."""
        full, self._full = self._full, {}
        return full

    def edge(self) -> dict[TileKey, bytes]:
        """The partial tile of each level now (the root needs only these)."""
        return {
            (level, self._counts[level] // TILE_WIDTH): bytes(partial)
            for level, partial in enumerate(self._partial)
            if partial
        }

    def tiles(self) -> dict[TileKey, bytes]:
        """Every tile that filled or grew since the start, by key."""
        changed = dict(self._full)
        for key, hashes in self.edge().items():
            if key[0] in self._grown:
                changed[key] = hashes
        return changed

    def root(self) -> bytes:
        return TileReader(self.size, self.edge()).root()
