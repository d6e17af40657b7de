"""WebShop's catalogue pipeline: the product record, the procedural catalogue, and the original data made ready.

Modules (this file imports none of them): `products` (the product record and how raw data becomes one),
`jsonstream` (streamed reading of multi-GB JSON), `nouns` (title nouns for the reward's type factor),
`generation` + `words` (the procedural catalogue and its word banks), `download` (the original files, a resumable
checksum-verified download) and `prepare` (`trl-ragen2 data webshop {small,all}`). The environment loads a
catalogue through `../data.py`.
"""
