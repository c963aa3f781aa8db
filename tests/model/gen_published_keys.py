"""Regenerate published_keys.tsv by expanding the key list of shared/research/model.md §2.3.

The table is written out from the brief's compact notation by hand (not from the network
code), so the key test really checks the module naming. Run: python gen_published_keys.py
"""

from __future__ import annotations

from pathlib import Path

Row = tuple[str, tuple[int, ...]]
D, DEPTH, HIDDEN = 1024, 24, 4096
DIMS = [1024, 256, 128, 64, 32]


def encoder() -> list[Row]:
    rows: list[Row] = [
        ("encoder.image_mean", (1, 3, 1, 1)),
        ("encoder.image_std", (1, 3, 1, 1)),
        ("encoder.backbone.cls_token", (1, 1, D)),
        ("encoder.backbone.pos_embed", (1, 1370, D)),
        ("encoder.backbone.mask_token", (1, D)),
        ("encoder.backbone.patch_embed.proj.weight", (D, 3, 14, 14)),
        ("encoder.backbone.patch_embed.proj.bias", (D,)),
        ("encoder.backbone.depth_patch_embed.proj.weight", (D, 1, 14, 14)),
        ("encoder.backbone.depth_patch_embed.proj.bias", (D,)),
    ]
    for n in range(DEPTH):
        b = f"encoder.backbone.blocks.{n}"
        rows += [
            (f"{b}.norm1.weight", (D,)),
            (f"{b}.norm1.bias", (D,)),
            (f"{b}.attn.qkv.weight", (3 * D, D)),
            (f"{b}.attn.qkv.bias", (3 * D,)),
            (f"{b}.attn.proj.weight", (D, D)),
            (f"{b}.attn.proj.bias", (D,)),
            (f"{b}.ls1.gamma", (D,)),
            (f"{b}.norm2.weight", (D,)),
            (f"{b}.norm2.bias", (D,)),
            (f"{b}.mlp.fc1.weight", (HIDDEN, D)),
            (f"{b}.mlp.fc1.bias", (HIDDEN,)),
            (f"{b}.mlp.fc2.weight", (D, HIDDEN)),
            (f"{b}.mlp.fc2.bias", (D,)),
            (f"{b}.ls2.gamma", (D,)),
        ]
    rows += [
        ("encoder.backbone.norm.weight", (D,)),
        ("encoder.backbone.norm.bias", (D,)),
        ("encoder.output_projections.0.weight", (D, D, 1, 1)),
        ("encoder.output_projections.0.bias", (D,)),
    ]
    return rows


def stack(name: str, dim_in: list[int], res_blocks: int, head: bool) -> list[Row]:
    rows: list[Row] = []
    for level, (cin, c) in enumerate(zip(dim_in, DIMS, strict=True)):
        rows += [
            (f"{name}.input_blocks.{level}.weight", (c, cin, 1, 1)),
            (f"{name}.input_blocks.{level}.bias", (c,)),
        ]
    for level in range(3):  # ConvTranspose weight is (in, out, k, k); its bias has `out` entries
        cin, cout = DIMS[level], DIMS[level + 1]
        rows += [
            (f"{name}.resamplers.{level}.0.weight", (cin, cout, 2, 2)),
            (f"{name}.resamplers.{level}.0.bias", (cout,)),
            (f"{name}.resamplers.{level}.1.weight", (cout, cout, 3, 3)),
            (f"{name}.resamplers.{level}.1.bias", (cout,)),
        ]
    rows += [(f"{name}.resamplers.3.1.weight", (32, 64, 3, 3)), (f"{name}.resamplers.3.1.bias", (32,))]
    for level in (1, 2, 3):
        c = DIMS[level]
        for block in range(res_blocks):
            for layer in (2, 5):
                p = f"{name}.res_blocks.{level}.{block}.layers.{layer}"
                rows += [(f"{p}.weight", (c, c, 3, 3)), (f"{p}.bias", (c,))]
    if head:
        rows += [(f"{name}.output_blocks.4.weight", (1, 32, 1, 1)), (f"{name}.output_blocks.4.bias", (1,))]
    return rows


def published() -> list[Row]:
    return (
        encoder()
        + stack("neck", [1026, 2, 2, 2, 2], 2, head=False)
        + stack("depth_head", DIMS, 1, head=True)
        + stack("mask_head", DIMS, 1, head=True)
    )


if __name__ == "__main__":
    lines = [f"{key}\t{','.join(map(str, shape))}" for key, shape in published()]
    Path(__file__).with_name("published_keys.tsv").write_text("\n".join(lines) + "\n")
    print(len(lines), "rows")
