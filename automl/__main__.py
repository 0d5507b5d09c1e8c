from automl.cli import main

main()
