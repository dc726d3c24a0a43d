// A static program the image tests put in an image.
package main

import "os"

func main() { os.Stdout.WriteString("hello\n") }
