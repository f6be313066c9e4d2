"""The DCP patch series: manifest model, targets, git engine, installed-tree engine, releases."""
