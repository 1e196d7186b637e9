"""vLLM: line patterns of every release (lines.py), sizing rules (rules.py), eras (eras.py), finish."""
