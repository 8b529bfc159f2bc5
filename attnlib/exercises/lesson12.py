"""Checkers for the exercises of the lesson on self-attention and CNNs."""

from __future__ import annotations

import numpy as np

from . import exercise, expect, phrase

# --------------------------------------------------------------------------- 12.1


def patchify_reference(image: np.ndarray, patch: int) -> np.ndarray:
    """(H, W, C) -> (H/p · W/p, p·p·C): patches in raster order, each flattened row by row."""
    height, width, channels = image.shape
    grid = image.reshape(height // patch, patch, width // patch, patch, channels)
    return grid.transpose(0, 2, 1, 3, 4).reshape(-1, patch * patch * channels)


def unpatchify_reference(tokens: np.ndarray, height: int, width: int, patch: int) -> np.ndarray:
    """The inverse of ``patchify_reference``: (N, p·p·C) -> (H, W, C)."""
    channels = tokens.shape[-1] // (patch * patch)
    grid = tokens.reshape(height // patch, width // patch, patch, patch, channels)
    return grid.transpose(0, 2, 1, 3, 4).reshape(height, width, channels)


@exercise("12.1", "from patch tokens back to the image")
def _check_unpatchify(unpatchify) -> None:
    rng = np.random.default_rng(801)
    cases = [(4, 4, 3, 2), (5, 10, 3, 1), (8, 12, 3, 4), (6, 9, 1, 3), (16, 16, 2, 8)]
    for height, width, channels, patch in cases:
        image = rng.normal(0.0, 1.0, (height, width, channels))
        tokens = patchify_reference(image, patch)
        call = phrase(
            "unpatchify(tokens of shape {shape}, height={height}, width={width}, patch={patch})",
            shape=tokens.shape,
            height=height,
            width=width,
            patch=patch,
        )
        got = np.asarray(unpatchify(tokens.copy(), height, width, patch))
        expect(
            got.shape == image.shape,
            "{call} has shape {got_shape}; expected (height, width, channels) = {image_shape}.",
            call=call,
            got_shape=got.shape,
            image_shape=image.shape,
        )
        if np.allclose(got, image):
            continue
        expect(
            not np.allclose(got, tokens.reshape(image.shape)),
            "{call}: a plain reshape reads the numbers in memory order, so the first token "
            "fills the first image row(s). A token is a p×p square: reshape to "
            "(H/p, W/p, p, p, C) first, then put the axes in the order (H/p, p, W/p, p, C).",
            call=call,
        )
        rows, cols = height // patch, width // patch
        swapped_grid = tokens.reshape(cols, rows, patch, patch, channels).transpose(1, 2, 0, 3, 4)
        expect(
            not np.allclose(got, swapped_grid.reshape(image.shape)),
            "{call}: the patches land in the wrong places. Patches are numbered row by row: "
            "token k is patch row k // (W/p), patch column k % (W/p).",
            call=call,
        )
        expect(
            False,
            "{call} has the right shape but the wrong numbers. Inside a token the pixels are "
            "stored row by row, each pixel's C channels together: (p, p, C).",
            call=call,
        )


# --------------------------------------------------------------------------- 12.2


@exercise("12.2", "the CNN's pooling")
def _check_pooled_cnn_accuracy(pooled_cnn_accuracy) -> None:
    results = {}
    for pooling in ("max", "mean"):
        call = f'pooled_cnn_accuracy("{pooling}", 200)'
        got = pooled_cnn_accuracy(pooling, 200)
        expect(
            np.ndim(got) == 0,
            "{call} returned {got!r}; return one test accuracy.",
            call=call,
            got=got,
        )
        got = float(got)
        expect(
            0.6 < got <= 1.0,
            "{call} = {got:.3f}: a trained SmallCNN gets most of the 1000 test images right. "
            "Train it with train(model, x, y, seed) on plus_or_times(size, seed=seed) and "
            "measure accuracy(model, x_test, y_test).",
            call=call,
            got=got,
        )
        results[pooling] = got
    expect(
        results["max"] > 0.95,
        'pooled_cnn_accuracy("max", 200) = {results_max:.3f}: with max pooling the '
        "lesson's CNN gets about 1.00 with 200 images. Build it with "
        "SmallCNN(seed, pooling=pooling).",
        results_max=results["max"],
    )
    expect(
        results["max"] != results["mean"],
        "Both poolings give the same accuracy: pass the pooling on, "
        "SmallCNN(seed, pooling=pooling).",
    )
    expect(
        results["max"] > results["mean"],
        'pooled_cnn_accuracy("max", 200) = {results_max:.3f} is below pooled_cnn_accuracy('
        '"mean", 200) = {results_mean:.3f}: the two poolings look swapped. The maximum keeps the '
        "one place where the shape sits, so it should score higher; check that the pooling you "
        "were asked for reaches SmallCNN(seed, pooling=pooling).",
        results_max=results["max"],
        results_mean=results["mean"],
    )


# --------------------------------------------------------------------------- 12.3


@exercise("12.3", "receptive field of stacked convolutions")
def _check_receptive_field(receptive_field) -> None:
    cases = [(1, 3), (2, 3), (3, 3), (10, 3), (1, 5), (4, 5), (3, 7), (5, 1)]
    for num_layers, kernel_size in cases:
        want = 1 + num_layers * (kernel_size - 1)
        call = f"receptive_field(num_layers={num_layers}, kernel_size={kernel_size})"
        got = int(round(float(receptive_field(num_layers, kernel_size))))
        if got == want:
            continue
        expect(
            got != num_layers * kernel_size,
            "{call} = {got} = num_layers × kernel_size. Consecutive windows overlap: each new "
            "layer adds kernel_size − 1 pixels to the side length, not kernel_size.",
            call=call,
            got=got,
        )
        expect(
            got != kernel_size**num_layers,
            "{call} = {got} = kernel_size ** num_layers: that grows far too fast. Each layer "
            "widens the window by a fixed amount, so the size grows linearly with the depth.",
            call=call,
            got=got,
        )
        expect(
            False,
            "{call} = {got}, expected {want}. One k×k layer sees k pixels across; every further "
            "layer adds (k − 1) // 2 on each side.",
            call=call,
            got=got,
            want=want,
        )


# --------------------------------------------------------------------------- 12.4


def _conv_by_heads(x: np.ndarray, kernel: np.ndarray, head_weights) -> np.ndarray:
    """Σ over offsets of shifted(x) @ head_weights(kernel, dr, dc), zero padding; x (H, W, C_in)."""
    size = kernel.shape[-1]
    r = size // 2
    height, width, _ = x.shape
    padded = np.pad(x, ((r, r), (r, r), (0, 0)))
    out = np.zeros((height, width, kernel.shape[0]))
    for dr in range(-r, r + 1):
        for dc in range(-r, r + 1):
            shifted = padded[r + dr : r + dr + height, r + dc : r + dc + width]
            out += shifted @ np.asarray(head_weights(kernel, dr, dc), dtype=float)
    return out


@exercise("12.4", "the weights of the head for offset (dr, dc)")
def _check_head_weights(head_weights) -> None:
    import torch  # only this checker needs PyTorch

    rng = np.random.default_rng(804)
    for c_out, c_in, size in [(2, 3, 3), (4, 1, 3), (3, 5, 5)]:
        kernel = rng.normal(0.0, 1.0, (c_out, c_in, size, size))
        r = size // 2
        for dr, dc in [(-1, 0), (0, 1), (1, -1), (0, 0), (-r, r)]:
            call = phrase(
                "head_weights(kernel of shape {shape}, dr={dr}, dc={dc})",
                shape=kernel.shape,
                dr=dr,
                dc=dc,
            )
            got = np.asarray(head_weights(kernel.copy(), dr, dc), dtype=float)
            want = kernel[:, :, r + dr, r + dc].T
            expect(
                got.shape != (c_out, c_in) or c_out == c_in,
                "{call} has shape {got_shape} = (C_out, C_in). Tokens are rows and are "
                "multiplied from the left, x @ W, so W must be (C_in, C_out): transpose.",
                call=call,
                got_shape=got.shape,
            )
            expect(
                got.shape == want.shape,
                "{call} has shape {got_shape}; expected (C_in, C_out) = {want_shape}.",
                call=call,
                got_shape=got.shape,
                want_shape=want.shape,
            )
            if np.allclose(got, want):
                continue
            expect(
                not np.allclose(got, kernel[:, :, r - dr, r - dc].T),
                "{call}: this is the tap at (−dr, −dc). PyTorch's Conv2d does not flip the "
                "kernel (it computes a cross-correlation): the neighbour at offset (dr, dc) "
                "meets kernel[:, :, {r} + dr, {r} + dc].",
                call=call,
                r=r,
            )
            expect(
                not np.allclose(got, kernel[:, :, r + dc, r + dr].T),
                "{call}: rows and columns are swapped. dr moves down the rows (the kernel's "
                "axis 2), dc along the columns (axis 3).",
                call=call,
            )
            expect(
                False,
                "{call} gives the wrong numbers; expected kernel[:, :, r+dr, r+dc].T.",
                call=call,
            )
    # The meaning, checked end to end: summing the heads reproduces PyTorch's convolution.
    kernel = rng.normal(0.0, 1.0, (2, 3, 3, 3))
    x = rng.normal(0.0, 1.0, (5, 6, 3))
    ours = _conv_by_heads(x, kernel, head_weights)
    theirs = torch.nn.functional.conv2d(
        torch.from_numpy(x).permute(2, 0, 1)[None], torch.from_numpy(kernel), padding=1
    )[0].permute(1, 2, 0)
    expect(
        np.allclose(ours, theirs.numpy(), atol=1e-10),
        "Summing shifted(x) @ head_weights(kernel, dr, dc) over all offsets does not reproduce "
        "torch.nn.functional.conv2d(..., padding=1).",
    )
