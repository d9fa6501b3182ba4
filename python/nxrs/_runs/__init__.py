"""_runs"""
