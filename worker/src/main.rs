fn main() {
    println!("lavender-worker");
}
