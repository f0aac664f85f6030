"""Engines that answer a notebook's model stages elsewhere: batch files and shards, the vendors'
batch APIs, Slurm job arrays, Ray, and other harnesses' logs (lm-eval, HELM).
"""
