"""Checkers for the exercises of lesson 08."""

from __future__ import annotations
