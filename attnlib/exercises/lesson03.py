"""Checkers for the exercises of lesson 03."""

from __future__ import annotations
