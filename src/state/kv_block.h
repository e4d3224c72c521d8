/* KV blocks (docs/state-cache.md, Blocks): the unit in which attention
 * reads the KV cache, the pool holds it, and the tiers name and store it.
 *
 * A block holds KV_BLOCK_ROWS consecutive rows of a sequence: for every
 * attention layer l, its K cells of those rows, then its V cells, each
 * cell row_bytes of F16 values (n_head_kv * head_dim of them):
 *
 *    [layer 0: K row 0 .. K row B-1, V row 0 .. V row B-1][layer 1: ...]...
 *
 * so a block is KV_BLOCK_ROWS * kv_cache_row_bytes(hp) bytes, and the K
 * cell of its row r in layer l is at (2 * l * B + r) * row_bytes, the V
 * cell at ((2 * l + 1) * B + r) * row_bytes.
 *
 * Why 64 rows: a multiple of the attention tiles (PH_ATTN_TILE_KV), so no
 * tile straddles two blocks and the kernels read a tile from one place;
 * the stride at which the disk keys were already taken; small enough that
 * the unshared tail of a sequence (copied when two share it) and the
 * memory a short request takes beyond its rows stay small (under 7 MiB for
 * the 2B model's 112 KiB rows), large enough that a block's per-layer
 * parts (64 cells, 8 KiB or more for heads of 64) are read at full speed
 * and that a 32k context is 512 blocks, not thousands. */
#ifndef PH_STATE_KV_BLOCK_H
#define PH_STATE_KV_BLOCK_H

#define KV_BLOCK_ROWS 64

#endif
