"""The presets: YAML files of a run's settings, installed with the package (``recipes/configs/`` in a checkout links
to this folder). A preset is named by its name (``finetune_own_images_cpu``) anywhere one is asked for
(``mpp.config.building.preset_path``); a path to a YAML file of your own works too."""
