"""_storage"""
