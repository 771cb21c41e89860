"""The "moves" head: a sample is an anchor placement with a few of its units moved, so that fine-tuning a
pre-trained policy searches near its start instead of scattering thousands of units (a simplified Placeto).

A sample draws K units without replacement from a categorical over the units (the policy's move logits,
which see the anchor), then, for each, a device from that unit's device logits with its anchor device
masked. Its log-probability is the sum of those 2K draws' log-probabilities, each unit draw normalized over
the units not drawn before it. The K units are drawn in one pass with the Gumbel-top-k trick, whose order
is distributed as K sequential draws without replacement (Kool et al., ICML 2019).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

MASKED = -1e9
"""The logit of a choice that is not allowed."""
NO_MOVE = -1
"""A draw that did not happen (fewer movable units than K, or a sample that is the anchor itself)."""


@dataclass(frozen=True)
class MoveSample:
    anchor: np.ndarray
    """[U] the placement the moves start from."""
    units: np.ndarray
    """[K] the moved units, in the order drawn (NO_MOVE: no draw)."""
    devices: np.ndarray
    """[K] each moved unit's new device (NO_MOVE where `units` is)."""
    noise: np.ndarray
    """[U, D] the logit noise the draws saw."""

    @property
    def assignment(self) -> np.ndarray:
        placement = self.anchor.copy()
        drawn = self.units != NO_MOVE
        placement[self.units[drawn]] = self.devices[drawn]
        return placement

    @classmethod
    def unmoved(cls, anchor: np.ndarray, moves: int, noise: np.ndarray) -> MoveSample:
        """The anchor itself, as a sample of no moves (log-probability 0)."""
        none = np.full(moves, NO_MOVE, np.int64)
        return cls(anchor.copy(), none, none.copy(), noise)


def cut_shares(edges: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """[B, U] float32: for each of B placements [B, U], the share of each unit's edges (edges [E, 2])
    whose other end is on another device (0 for a unit without edges)."""
    count = anchors.shape[1]
    degree = np.maximum(np.bincount(edges.ravel(), minlength=count), 1)
    shares = np.empty(anchors.shape, np.float32)
    for row, anchor in enumerate(anchors):
        crossing = edges[anchor[edges[:, 0]] != anchor[edges[:, 1]]]
        shares[row] = np.bincount(crossing.ravel(), minlength=count) / degree
    return shares


def away_logits(device_logits: tf.Tensor, anchors: tf.Tensor) -> tf.Tensor:
    """[B, U, D] masked device logits [B, U, D] with each unit's anchor device (anchors [B, U]) masked too:
    where a moved unit may go."""
    at_anchor = tf.one_hot(anchors, tf.shape(device_logits)[2], on_value=True, off_value=False)
    return tf.where(at_anchor, MASKED, device_logits)


def move_and_away_logits(policy, move_bias: tf.Tensor, device_logits: tf.Tensor, anchors: tf.Tensor,
                cut: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """([B, U] logits of drawing each unit to move, [B, U, D] `away_logits`). A unit with no allowed
    device besides its anchor's cannot be drawn."""
    away = away_logits(device_logits, anchors)
    movable = tf.reduce_max(away, axis=2) > MASKED / 2
    own = tf.gather(device_logits, anchors, axis=2, batch_dims=2)
    # an unmovable unit's regret is about MASKED: keep it finite and out of the gradient
    regrets = tf.where(movable, tf.reduce_logsumexp(away, axis=2) - own, 0.0)
    return tf.where(movable, policy.move_logits(move_bias, cut, regrets), MASKED), away


def draw_moves(move_logits: tf.Tensor, away: tf.Tensor, moves: int, seeds: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """[B, K] units and [B, K] devices: K moves per placement, drawn from `move_and_away_logits` (seeds [2, 2] for
    the stateless draws); NO_MOVE where fewer than K units can move."""
    uniform = tf.random.stateless_uniform(tf.shape(move_logits), seed=seeds[0], minval=1e-20, maxval=1.0)
    _, units = tf.math.top_k(move_logits - tf.math.log(-tf.math.log(uniform)), k=moves)
    drawable = tf.gather(move_logits, units, batch_dims=1) > MASKED / 2
    destinations = tf.gather(away, units, batch_dims=1)  # [B, K, D]
    devices = tf.random.stateless_categorical(tf.reshape(destinations, [-1, tf.shape(away)[2]]), 1, seed=seeds[1],
                                              dtype=tf.int32)
    devices = tf.reshape(devices, tf.shape(units))
    return (tf.where(drawable, units, NO_MOVE).numpy().astype(np.int64),
            tf.where(drawable, devices, NO_MOVE).numpy().astype(np.int64))


def move_log_probs(move_logits: tf.Tensor, away: tf.Tensor, units: tf.Tensor,
                   devices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """[B] log-probabilities of B samples' moves (units, devices [B, K], NO_MOVE for no draw) and [B] the
    entropies of their draws, summed: each unit draw's over the units not drawn before it, and each
    destination's."""
    drawn = units != NO_MOVE
    taken = tf.one_hot(units, tf.shape(move_logits)[1], on_value=True, off_value=False)  # NO_MOVE: a zero row
    before = tf.math.cumsum(tf.cast(taken, tf.int32), axis=1, exclusive=True) > 0  # [B, K, U]
    remaining = tf.nn.log_softmax(tf.where(before, MASKED, move_logits[:, None, :]))
    safe_units = tf.maximum(units, 0)
    unit_log_probs = tf.gather(remaining, safe_units, axis=2, batch_dims=2)
    destinations = tf.nn.log_softmax(tf.gather(away, safe_units, batch_dims=1))  # [B, K, D]
    device_log_probs = tf.gather(destinations, tf.maximum(devices, 0), axis=2, batch_dims=2)
    entropies = (-tf.reduce_sum(tf.exp(remaining) * remaining, axis=2)
                 - tf.reduce_sum(tf.exp(destinations) * destinations, axis=2))
    log_probs = tf.reduce_sum(tf.where(drawn, unit_log_probs + device_log_probs, 0.0), axis=1)
    return log_probs, tf.reduce_sum(tf.where(drawn, entropies, 0.0), axis=1)
