"""_audit"""
