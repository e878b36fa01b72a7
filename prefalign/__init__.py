"""prefalign's ground floor: machinery every stage uses (models, precision, generation, training glue).

It imports none of the stages (`preference_data`, `reward_models`, `align`, `leaderboards`); they import it.
"""
