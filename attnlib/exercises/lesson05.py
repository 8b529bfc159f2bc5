"""Checkers for the exercises of lesson 05."""

from __future__ import annotations
