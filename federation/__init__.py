"""Federation with peer ANS servers: trusted peers and their tiers, the
outbound DISCOVER client, verification of peer result sets, merge, re-rank
and re-sign, federation_path and hop/loop control. Imported as
``ans.federation``; built in the federation issue.
"""
