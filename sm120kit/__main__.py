from sm120kit.cli import main

if __name__ == "__main__":
    main()
