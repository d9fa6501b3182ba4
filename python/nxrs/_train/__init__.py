"""_train"""
