"""Checkers for the exercises of lesson 07."""

from __future__ import annotations
