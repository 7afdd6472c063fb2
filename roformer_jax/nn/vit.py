"""A small ViT-style classifier on the encoder: an image's patches as tokens, positions on 2 axes.

Dosovitskiy et al. 2021 (ViT): an image cut into p × p patches, each flattened and projected
to D, is a sequence of L tokens for `roformer_jax.nn.model.Encoder`; a linear classifier reads
the mean of the encoder's outputs. Where each patch lies, its (row, col), reaches the encoder
through `ModelConfig.position`: "rope_nd" with its section's axes=2 is RoPE-Axial (Heo et al.
2024, "Rotary Position Embedding for Vision Transformer": half the pairs turn with the row, half
with the column), "rope_learned" with per_head is RoPE-Mixed (frequencies learned per head),
"none" is a bag of patches. Or through ViT's own learned absolute table of R × S rows
(`table_grid`, with position="none"), which a larger image meets bilinearly resized to its
grid, as ViT and DeiT resize theirs to fine-tune at a higher resolution.

The classifier pools by the mean, not a [CLS] token: a [CLS] token has no place on the grid, so
RoPE would need a rule for it (Heo et al. leave it unrotated) that the mean does not.

Glossary of shapes: B batch, Y × X pixels, C channels, p patch side, R × S grid of patches
(R = Y / p, S = X / p), L = R·S patches (tokens, row-major), Q = p·p·C features of a patch,
D model dim, A = 2 position axes (row, col).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from roformer_jax.nn.attention_kinds import AttentionContext
from roformer_jax.nn.model import Encoder
from roformer_jax.nn.model_config import ModelConfig


def patchify(images, patch: int) -> jax.Array:
    """images [B, Y, X, C] -> patches [B, L, Q]: the R × S grid row-major, each patch's pixels
    row-major and channels last within it (Q = p·p·C). Y and X must be multiples of p."""
    b, y, x, c = images.shape
    if y % patch or x % patch:
        raise ValueError(f"images of {y} x {x} pixels do not split into {patch} x {patch} patches")
    r, s = y // patch, x // patch
    grid = jnp.reshape(images, (b, r, patch, s, patch, c)).transpose(0, 1, 3, 2, 4, 5)
    return grid.reshape(b, r * s, patch * patch * c)  # [B, L, Q]


def unpatchify(patches, patch: int, grid: tuple[int, int]) -> jax.Array:
    """patchify's inverse: patches [B, L, Q] of an R × S `grid` -> images [B, R·p, S·p, C]."""
    b, length, q = patches.shape
    r, s = grid
    if length != r * s or q % (patch * patch):
        raise ValueError(
            f"patches {patches.shape} are not a {r} x {s} grid of {patch} x {patch} patches"
        )
    c = q // (patch * patch)
    images = jnp.reshape(patches, (b, r, s, patch, patch, c)).transpose(0, 1, 3, 2, 4, 5)
    return images.reshape(b, r * patch, s * patch, c)  # [B, Y, X, C]


def grid_positions(grid: tuple[int, int]) -> jax.Array:
    """(row, col) of each patch of an R × S grid in patchify's order: int32 [L, 2]."""
    rows, cols = jnp.meshgrid(jnp.arange(grid[0]), jnp.arange(grid[1]), indexing="ij")
    return jnp.stack([rows.ravel(), cols.ravel()], axis=-1)  # [L, 2]


def resize_table(table, grid: tuple[int, int]) -> jax.Array:
    """A learned position table [R, S, D] bilinearly resized to `grid` (R', S'): [R', S', D].

    Pixel centres at half-integers (torch's align_corners=False, as DeiT's resize of its table):
    at the table's own grid every sample falls on a row, and the table comes back unchanged.
    """
    return jax.image.resize(table, (*grid, table.shape[-1]), method="linear")


def _check_encoding(cfg: ModelConfig) -> None:
    """ValueError for an encoding that cannot place a patch by its (row, col)."""
    encoding = cfg.encoding
    if cfg.axes is None and (encoding.embed or encoding.rotation or encoding.bias):
        raise ValueError(
            f"position={cfg.position!r} reads one integer per token; a ViT's patches have "
            "two (row, col): use 'rope_nd', 'rope_learned', or 'none' with table_grid"
        )
    if cfg.axes is not None and cfg.axes != 2:
        raise ValueError(
            f"position={cfg.position!r} with sections.{cfg.position}.axes={cfg.axes}; a "
            "ViT's patches have 2 (row, col)"
        )


class ViT(nn.Module):
    """images [B, Y, X, C] -> class logits [B, num_classes] float32.

    position_ids: int [B, L, 2], each patch's (row, col); default `grid_positions` of the
    image's grid (tests shift them). table_grid: (R, S), the grid of a learned absolute table
    (the training images' grid), looked up at the position ids after `resize_table` to the
    image's grid; None: no table. Dropout (deterministic=False) draws from the "dropout" rng.
    """

    config: ModelConfig
    patch: int
    num_classes: int
    table_grid: tuple[int, int] | None = None

    @nn.compact
    def __call__(self, images, position_ids=None, deterministic: bool = True):
        cfg = self.config
        _check_encoding(cfg)
        init = nn.initializers.normal(cfg.initializer_range)
        patches = patchify(images, self.patch)  # [B, L, Q]
        b, length, _ = patches.shape
        grid = (images.shape[1] // self.patch, images.shape[2] // self.patch)
        if position_ids is None:
            position_ids = jnp.broadcast_to(grid_positions(grid), (b, length, 2))
        if position_ids.shape != (b, length, 2):
            raise ValueError(
                f"position_ids has shape {position_ids.shape}; expected {(b, length, 2)}"
            )
        x = nn.Dense(cfg.hidden_size, kernel_init=init, name="patch_embedding")(
            patches
        )  # [B, L, D]
        if self.table_grid is not None:
            table = self.param("position_table", init, (*self.table_grid, cfg.hidden_size))
            table = resize_table(table, grid)  # [R, S, D]
            x = x + table[position_ids[..., 0], position_ids[..., 1]]  # [B, L, D]
        context = AttentionContext(
            mask=None, position_ids=position_ids, deterministic=deterministic
        )
        x = Encoder(cfg, name="encoder")(x, context)  # [B, L, D]
        logits = nn.Dense(self.num_classes, kernel_init=init, name="head")(x.mean(axis=1))
        return logits.astype(jnp.float32)  # [B, num_classes]
