"""Checkers for the exercises of lesson 06."""

from __future__ import annotations
