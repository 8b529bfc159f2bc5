"""Checkers for the exercises of lesson 09."""

from __future__ import annotations
