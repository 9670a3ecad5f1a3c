from compiler.cli.main import main

if __name__ == "__main__":  # a spawned builder (where there is no fork server) imports this module again
    main()
