"""The checkers of lesson 12: reference solutions pass, plausible mistakes get a useful hint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.exercises.lesson12 import patchify_reference, unpatchify_reference

# ---------------------------------------------------------------- reference solutions


def unpatchify(tokens, height, width, patch):
    channels = tokens.shape[1] // (patch * patch)
    grid = tokens.reshape(height // patch, width // patch, patch, patch, channels)
    return grid.swapaxes(1, 2).reshape(height, width, channels)


def pooled_cnn_accuracy(pooling, size, seed=0):
    """Stands in for the lesson's training (the notebook's solution trains real CNNs): max
    pooling suits the task better than the mean."""
    return {"max": 0.996, "mean": 0.96}[pooling]


def receptive_field(num_layers, kernel_size):
    return 1 + num_layers * (kernel_size - 1)


def head_weights(kernel, dr, dc):
    r = kernel.shape[-1] // 2
    return kernel[:, :, r + dr, r + dc].T


# ---------------------------------------------------------------- plausible mistakes


def unpatchify_plain_reshape(tokens, height, width, patch):
    return tokens.reshape(height, width, -1)


def unpatchify_swapped_grid(tokens, height, width, patch):
    channels = tokens.shape[1] // (patch * patch)
    grid = tokens.reshape(width // patch, height // patch, patch, patch, channels)
    return grid.transpose(1, 2, 0, 3, 4).reshape(height, width, channels)


def unpatchify_transposed_patch(tokens, height, width, patch):
    channels = tokens.shape[1] // (patch * patch)
    grid = tokens.reshape(height // patch, width // patch, patch, patch, channels)
    return grid.transpose(0, 3, 1, 2, 4).reshape(height, width, channels)


def field_product(num_layers, kernel_size):
    return num_layers * kernel_size


def field_power(num_layers, kernel_size):
    return kernel_size**num_layers


def field_off_by_one(num_layers, kernel_size):
    return num_layers * (kernel_size - 1)


def head_weights_not_transposed(kernel, dr, dc):
    return kernel[:, :, 1 + dr, 1 + dc]


def head_weights_flipped(kernel, dr, dc):
    r = kernel.shape[-1] // 2
    return kernel[:, :, r - dr, r - dc].T


def head_weights_swapped(kernel, dr, dc):
    r = kernel.shape[-1] // 2
    return kernel[:, :, r + dc, r + dr].T


CORRECT = {
    "12.1": unpatchify,
    "12.2": pooled_cnn_accuracy,
    "12.3": receptive_field,
    "12.4": head_weights,
}

WRONG = [
    ("12.1", unpatchify_plain_reshape, "plain reshape"),
    ("12.1", unpatchify_swapped_grid, "wrong places"),
    ("12.1", unpatchify_transposed_patch, "row by row"),
    ("12.1", lambda tokens, h, w, p: tokens, "expected (height, width, channels)"),
    ("12.2", lambda pooling, size, seed=0: 0.9, "pooling=pooling"),
    ("12.2", lambda pooling, size, seed=0: {"max": 0.5, "mean": 0.4}[pooling], "most of the"),
    ("12.2", lambda pooling, size, seed=0: {"max": 0.9, "mean": 0.8}[pooling], "about 1.00"),
    ("12.2", lambda pooling, size, seed=0: [0.9], "one test accuracy"),
    ("12.2", lambda pooling, size, seed=0: 0.99, "same accuracy"),
    ("12.2", lambda pooling, size, seed=0: {"max": 0.96, "mean": 0.996}[pooling], "swapped"),
    ("12.3", field_product, "overlap"),
    ("12.3", field_power, "linearly"),
    ("12.3", field_off_by_one, "expected"),
    ("12.4", head_weights_not_transposed, "transpose"),
    ("12.4", head_weights_flipped, "does not flip"),
    ("12.4", head_weights_swapped, "swapped"),
]


def test_patchify_reference_round_trip_and_order():
    image = np.random.default_rng(0).normal(size=(8, 12, 3))
    tokens = patchify_reference(image, 4)
    assert tokens.shape == (6, 48)
    assert np.array_equal(tokens[4], image[4:8, 4:8].reshape(-1))  # row 1, column 1 of the grid
    assert np.array_equal(unpatchify_reference(tokens, 8, 12, 4), image)


@pytest.mark.parametrize(("num_layers", "kernel_size"), [(1, 3), (2, 3), (3, 5)])
def test_receptive_field_formula_matches_stacked_convolutions(num_layers, kernel_size):
    # an impulse through num_layers convolutions of ones spreads over the receptive field
    size = 31
    x = torch.zeros(1, 1, size, size, dtype=torch.float64)
    x[..., size // 2, size // 2] = 1.0
    ones = torch.ones(1, 1, kernel_size, kernel_size, dtype=torch.float64)
    for _ in range(num_layers):
        x = torch.nn.functional.conv2d(x, ones, padding=kernel_size // 2)
    side = int((x[0, 0].abs().sum(dim=0) > 0).sum())
    assert side == receptive_field(num_layers, kernel_size)
