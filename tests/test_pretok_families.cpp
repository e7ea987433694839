// Pre-tokenizer audit: every family's split of a set of tricky strings
// (contractions in any case, digit runs, CJK and kana, emoji sequences,
// whitespace and newline runs, punctuation runs), the name aliases that
// converters write, and what each family implies besides its regexes.
//
// The expected pieces come from an independent engine: Python's `regex`
// module running each family's published patterns (HF tokenizer.json /
// llama.cpp's llama-vocab.cpp) in sequence with Isolated splitting, `\s`
// spelled as Unicode White_Space, each regex seeing one piece at a time.
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/pretokenizer.h"

using namespace infer;

namespace {

std::vector<std::string> split_text(const PreTokenizer& pre, std::string_view text) {
  std::vector<PreTokenizer::Span> spans;
  pre.split(text, spans);
  std::vector<std::string> out;
  for (const auto& s : spans) out.emplace_back(text.substr(s.first, s.second));
  return out;
}

struct Family {
  const char* pre;
  std::vector<std::vector<std::string>> want;  // one list of pieces per text
};

}  // namespace

TEST_CASE("pretok: every family splits tricky text as its reference does", "[tokenizer][bpe][pretok]") {
  const std::vector<std::string> texts = {
      "I'M he'S It'll 'Ve WE'D don't x'",
      "1 12 123 1234 12345 1234567 3.14",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4!",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8 \xE2\x9D\xA4\xEF\xB8\x8F x",
      "a  b   c\t\td  \xC2\xA0 e   ",
      "line1\n\nline2\r\n\r\n  x\n",
      "wait...!!! \?\? (a) [b] {c} --> ...x"};
  const std::vector<Family> families = {
      {"default",
       {
        {"I", "'", "M", " he", "'", "S", " It", "'", "ll", " ", "'", "Ve", " WE", "'", "D", " don", "'", "t", " x", "'"},
        {"1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45", " ", "123", "456", "7", " ", "3", ".", "14"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\t", "d", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n", "\n", "line", "2", "\r\n\r\n ", " x", "\n"},
        {"wait", "...!!!", " ", "\?\?", " ", "(", "a", ")", " ", "[", "b", "]", " ", "{", "c", "}", " ", "-->", " ", "...", "x"},
       }},
      {"llama-bpe",
       {
        {"I", "'M", " he", "'S", " It", "'ll", " '", "Ve", " WE", "'D", " don", "'t", " x", "'"},
        {"1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45", " ", "123", "456", "7", " ", "3", ".", "14"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\td", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n\n", "line", "2", "\r\n\r\n", " ", " x", "\n"},
        {"wait", "...!!!", " \?\?", " (", "a", ")", " [", "b", "]", " {", "c", "}", " -->", " ...", "x"},
       }},
      {"qwen2",
       {
        {"I", "'M", " he", "'S", " It", "'ll", " '", "Ve", " WE", "'D", " don", "'t", " x", "'"},
        {"1", " ", "1", "2", " ", "1", "2", "3", " ", "1", "2", "3", "4", " ", "1", "2", "3", "4", "5", " ", "1", "2", "3", "4", "5", "6", "7", " ", "3", ".", "1", "4"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\td", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n\n", "line", "2", "\r\n\r\n", " ", " x", "\n"},
        {"wait", "...!!!", " \?\?", " (", "a", ")", " [", "b", "]", " {", "c", "}", " -->", " ...", "x"},
       }},
      {"gpt-2",
       {
        {"I", "'", "M", " he", "'", "S", " It", "'ll", " '", "Ve", " WE", "'", "D", " don", "'t", " x", "'"},
        {"1", " 12", " 123", " 1234", " 12345", " 1234567", " 3", ".", "14"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\t", "d", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n", "\n", "line", "2", "\r\n\r\n ", " x", "\n"},
        {"wait", "...!!!", " \?\?", " (", "a", ")", " [", "b", "]", " {", "c", "}", " -->", " ...", "x"},
       }},
      {"falcon",
       {
        {"I", "'", "M", " he", "'", "S", " It", "'", "ll", " ", "'", "Ve", " WE", "'", "D", " don", "'", "t", " x", "'"},
        {"1", " 12", " ", "123", " ", "123", "4", " ", "123", "45", " ", "123", "456", "7", " 3", ".", "14"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\t", "d", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n", "\n", "line", "2", "\r\n\r\n ", " x", "\n"},
        {"wait", "...!!!", " ", "\?\?", " ", "(", "a", ")", " ", "[", "b", "]", " ", "{", "c", "}", " ", "-->", " ", "...", "x"},
       }},
      {"starcoder",
       {
        {"I", "'", "M", " he", "'", "S", " It", "'ll", " '", "Ve", " WE", "'", "D", " don", "'t", " x", "'"},
        {"1", " ", "1", "2", " ", "1", "2", "3", " ", "1", "2", "3", "4", " ", "1", "2", "3", "4", "5", " ", "1", "2", "3", "4", "5", "6", "7", " ", "3", ".", "1", "4"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\t", "d", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n", "\n", "line", "2", "\r\n\r\n ", " x", "\n"},
        {"wait", "...!!!", " \?\?", " (", "a", ")", " [", "b", "]", " {", "c", "}", " -->", " ...", "x"},
       }},
      {"deepseek-llm",
       {
        {"I", "'", "M", " he", "'", "S", " It", "'", "ll", " '", "Ve", " WE", "'", "D", " don", "'", "t", " x", "'"},
        {"1", " ", "12", " ", "123", " ", "1234", " ", "12345", " ", "1234567", " ", "3", ".", "14"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " ", "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " ", "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8 ", "\xE2\x9D\xA4", "\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\td", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n", "\n", "line", "2", "\r", "\n", "\r", "\n", " ", " x", "\n"},
        {"wait", "...!!!", " \?\?", " (", "a", ")", " [", "b", "]", " {", "c", "}", " -->", " ...", "x"},
       }},
      {"deepseek-coder",
       {
        {"I", "'", "M", " he", "'", "S", " It", "'", "ll", " '", "Ve", " WE", "'", "D", " don", "'", "t", " x", "'"},
        {"1", " ", "1", "2", " ", "1", "2", "3", " ", "1", "2", "3", "4", " ", "1", "2", "3", "4", "5", " ", "1", "2", "3", "4", "5", "6", "7", " ", "3", ".", "1", "4"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " ", "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " ", "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8 ", "\xE2\x9D\xA4", "\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\td", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n", "\n", "line", "2", "\r", "\n", "\r", "\n", " ", " x", "\n"},
        {"wait", "...!!!", " \?\?", " (", "a", ")", " [", "b", "]", " {", "c", "}", " --", ">", " ...", "x"},
       }},
      {"deepseek-v3",
       {
        {"I", "'M", " he", "'S", " It", "'ll", " '", "Ve", " WE", "'D", " don", "'t", " x", "'"},
        {"1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45", " ", "123", "456", "7", " ", "3", ".", "14"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " ", "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4", "\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\td", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n\n", "line", "2", "\r\n\r\n", " ", " x", "\n"},
        {"wait", "...!!!", " \?\?", " (", "a", ")", " [", "b", "]", " {", "c", "}", " -->", " ...", "x"},
       }},
      {"bloom",
       {
        {"I'M", " he'S", " It'll", " 'Ve", " WE'D", " don't", " x'"},
        {"1", " 12", " 123", " 1234", " 12345", " 1234567", " 3", ".", "14"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t\t", "d", "  \xC2\xA0", " e", "   "},
        {"line1", "\n\n", "line2", "\r\n\r\n ", " x", "\n"},
        {"wait", "...!!! \?\? (", "a", ")", " [b]", " {c}", " -->", " ...", "x"},
       }},
      {"viking",
       {
        {"I'M", " he'S", " It'll", " 'Ve", " WE'D", " don't", " x'"},
        {"1", " ", "1", "2", " ", "1", "2", "3", " ", "1", "2", "3", "4", " ", "1", "2", "3", "4", "5", " ", "1", "2", "3", "4", "5", "6", "7", " ", "3", ".", "1", "4"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t\t", "d", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n\n", "line", "2", "\r\n\r\n ", " x", "\n"},
        {"wait", "...!!! \?\? (", "a", ")", " [b]", " {c}", " -->", " ...", "x"},
       }},
      {"tekken",
       {
        {"I", "'M", " he", "'S", " It", "'ll", " '", "Ve", " WE", "'D", " don", "'t", " x", "'"},
        {"1", " ", "1", "2", " ", "1", "2", "3", " ", "1", "2", "3", "4", " ", "1", "2", "3", "4", "5", " ", "1", "2", "3", "4", "5", "6", "7", " ", "3", ".", "1", "4"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\td", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n\n", "line", "2", "\r\n\r\n", " ", " x", "\n"},
        {"wait", "...!!!", " \?\?", " (", "a", ")", " [", "b", "]", " {", "c", "}", " -->", " ...", "x"},
       }},
      {"gpt-4o",
       {
        {"I'M", " he'S", " It'll", " '", "Ve", " WE'D", " don't", " x", "'"},
        {"1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45", " ", "123", "456", "7", " ", "3", ".", "14"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", " ", " b", "  ", " c", "\t", "\td", "  \xC2\xA0", " e", "   "},
        {"line", "1", "\n\n", "line", "2", "\r\n\r\n", " ", " x", "\n"},
        {"wait", "...!!!", " \?\?", " (", "a", ")", " [", "b", "]", " {", "c", "}", " -->", " ...", "x"},
       }},
      {"chameleon",
       {
        {"I", "'", "M", " he", "'", "S", " It", "'", "ll", " ", "'", "Ve", " WE", "'", "D", " don", "'", "t", " x", "'"},
        {"1", " ", "1", "2", " ", "1", "2", "3", " ", "1", "2", "3", "4", " ", "1", "2", "3", "4", "5", " ", "1", "2", "3", "4", "5", "6", "7", " ", "3", ".", "1", "4"},
        {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", " \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", " \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "!"},
        {"emoji", " \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", " \xE2\x9D\xA4\xEF\xB8\x8F", " x"},
        {"a", "  ", "b", "  ", " c", "\t", "\t", "d", "  ", "\xC2\xA0", " e", "  ", " "},
        {"line", "1", "\n", "\n", "line", "2", "\r", "\n", "\r", "\n", "  ", "x", "\n"},
        {"wait", ".", ".", ".", "!", "!", "!", " ", "\?", "\?", " ", "(", "a", ")", " ", "[", "b", "]", " ", "{", "c", "}", " ", "-", "-", ">", " ", ".", ".", ".", "x"},
       }},
  };
  for (const Family& f : families) {
    const auto pre = PreTokenizer::create(f.pre);
    REQUIRE(f.want.size() == texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      INFO(f.pre << ": text " << i << " '" << texts[i] << "'");
      CHECK(split_text(*pre, texts[i]) == f.want[i]);
    }
  }
}

TEST_CASE("pretok: converter aliases split as their family", "[tokenizer][bpe][pretok]") {
  // (tokenizer.ggml.pre value, a name of the family whose regexes it uses),
  // as llama.cpp's llama-vocab.cpp maps them.
  const std::vector<std::pair<const char*, const char*>> aliases = {
      {"llama3", "llama-bpe"},      {"llama-v3", "llama-bpe"},   {"falcon3", "llama-bpe"},
      {"falcon-h1", "llama-bpe"},   {"pixtral", "llama-bpe"},    {"midm-2.0", "llama-bpe"},
      {"lfm2", "llama-bpe"},        {"dbrx", "llama-bpe"},       {"smaug-bpe", "llama-bpe"},
      {"chatglm-bpe", "llama-bpe"}, {"glm4", "llama-bpe"},       {"deepseek-r1-qwen", "qwen2"},
      {"stablelm2", "qwen2"},       {"megrez", "qwen2"},         {"phi-2", "gpt-2"},
      {"jina-es", "gpt-2"},         {"jina-de", "gpt-2"},        {"jina-v1-en", "gpt-2"},
      {"jina-v2-es", "gpt-2"},      {"jina-v2-de", "gpt-2"},     {"jina-v2-code", "gpt-2"},
      {"gigachat", "gpt-2"},        {"roberta-bpe", "gpt-2"},    {"a.x-4.0", "gpt-2"},
      {"mellum", "gpt-2"},          {"exaone4", "gpt-2"},        {"modern-bert", "gpt-2"},
      {"mpt", "gpt-2"},             {"olmo", "gpt-2"},           {"jais", "gpt-2"},
      {"refact", "starcoder"},      {"command-r", "starcoder"},  {"smollm", "starcoder"},
      {"codeshell", "starcoder"},   {"exaone", "starcoder"},     {"minerva-7b", "starcoder"},
      {"poro-chat", "bloom"},       {"gpt3-finnish", "bloom"},   {"llama4", "gpt-4o"},
  };
  const std::vector<std::string> texts = {
      "I'M he'S It'll 'Ve WE'D don't x'", "1 12 123 1234 12345 1234567 3.14",
      "\xE4\xBD\xA0\xE5\xA5\xBD \xE3\x81\x93\xE3\x82\xAB \xED\x95\x9C! \xF0\x9F\x98\x80\xF0\x9F\x8F\xBD",
      "a  b   c\t\td  \xC2\xA0 e   \n\n x\r\n", "wait...!!! ?? (a) [b] {c} --> ...x"};
  for (const auto& [alias, family] : aliases) {
    INFO(alias << " ~ " << family);
    const auto a = PreTokenizer::create(alias);
    const auto f = PreTokenizer::create(family);
    for (const std::string& t : texts) CHECK(split_text(*a, t) == split_text(*f, t));
  }
}

TEST_CASE("pretok: normalization, ignore_merges and BOS per family", "[tokenizer][bpe][pretok]") {
  // NFC: the reference tokenizer.json files of Qwen2 (and the DeepSeek-R1
  // Qwen distills), GPT-NeoX-20B (MPT, OLMo) and Command-R have an NFC
  // normalizer; no other supported family normalizes.
  const std::vector<std::string> nfc = {"qwen2", "deepseek-r1-qwen", "mpt", "olmo", "command-r"};
  // ignore_merges and BOS as llama.cpp sets them per pre-tokenizer.
  const std::vector<std::string> ignore_merges = {"llama3",  "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                                  "pixtral", "midm-2.0", "lfm2",      "tekken"};
  std::vector<std::string> bos = ignore_merges;
  bos.push_back("chameleon");
  auto in = [](const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
      if (x == s) return true;
    return false;
  };
  for (const std::string& name : PreTokenizer::names()) {
    INFO(name);
    PreTokenizerInfo info;
    REQUIRE(PreTokenizer::lookup(name, &info));
    CHECK((info.normalization == Normalization::NFC) == in(nfc, name));
    CHECK(info.normalization != Normalization::NFKC);
    CHECK(info.ignore_merges == in(ignore_merges, name));
    CHECK(info.add_bos == in(bos, name));
  }
}
