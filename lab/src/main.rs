//! `lab`: the binder-lab host CLI. cargo-make tasks are thin wrappers around these commands;
//! the commands live in `lab::cli`.

fn main() {
    lab::cli::main()
}
