"""
Every setting, said once. Four configs, each built in one place:
- Recipe (recipe.py): what to train and how to read out, a field per setting; run.py's flags, a
  checkpoint's identity and a params file's metadata derive from its fields. RECIPES
  (recipes.py) names the handout's and the project's.
- RunConfig (run_config.py): one command's paths and controls, and its Recipe; command_line.py
  builds it from run.py's flags, and the research scripts build their own.
- TrainerConfig (the course's trainer.py): the settings one training reads, under the course's
  names; pipeline/trainings.py builds it from the Recipe and a Stage, whose fields carry the
  Trainer's names (the one rename is Recipe.stages(): pretrain_lr fills a Stage's learning_rate).
- GPTConfig (the course's model.py): the model's shape, from the Recipe's size fields.
It stands on common, corpus and the course's model modules.
"""
